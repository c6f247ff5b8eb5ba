"""``python -m zarr_device.tools.cli``."""

import sys

from zarr_device.tools.cli import main

sys.exit(main())
