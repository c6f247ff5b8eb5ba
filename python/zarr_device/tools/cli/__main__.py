"""``python -m zarr_device.cli``."""

import sys

from zarr_device.cli import main

sys.exit(main())
