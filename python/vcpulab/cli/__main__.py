"""``python -m vcpulab.cli``: the ``vcpulab`` command."""

from vcpulab.cli import main

raise SystemExit(main())
