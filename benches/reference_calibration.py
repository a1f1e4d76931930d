"""Re-measures the calibration vcpulab ships (not a test).

    python benches/reference_calibration.py        # on the project's machine, quiet

Runs vcpulab.twins.calibrate() (about 10 s of real KVM) and saves it over
vcpulab.twins.REFERENCE_CALIBRATION, the calibration twins use where
/dev/kvm is absent (vcpulab.twins.reference_calibration, the pytest
fixture twin_calibration). Its provenance records this command, the
machine and the time.
"""

from __future__ import annotations

from vcpulab import twins


def main() -> None:
    cal = twins.calibrate(refresh=True)
    path = cal.save(twins.REFERENCE_CALIBRATION)
    print(cal.frame())
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
