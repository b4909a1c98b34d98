import os
import sys

# Run from the source tree: python/ on sys.path (PYTHONPATH=python does the same).
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
