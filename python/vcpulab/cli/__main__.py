"""``python -m vcpulab.cli``: the ``vcpulab`` command."""

from vcpulab.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
