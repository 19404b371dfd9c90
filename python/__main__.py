"""`python -m gmem_prof` and the `gmem-prof` command of the pip package:
runs the gmem-prof binary the wheel holds (in place of this process, so
signals, the terminal and the exit code are the binary's own)."""

import os
import sys


def main():
    exe = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "gmem-prof")
    if not os.access(exe, os.X_OK):
        sys.exit(f"gmem-prof: {exe} is missing: this installation of the gmem_prof package holds no binary")
    os.execv(exe, [exe] + sys.argv[1:])


if __name__ == "__main__":
    main()
