"""pytest configuration of the FPGA tests: make the helpers in this folder importable."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
