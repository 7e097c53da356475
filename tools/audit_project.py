"""Write the dvc.yaml of an audit project (kept for old instructions): the same as

    bnmem audit init DIR [--check]      # bnmem.audit_project; then: cd DIR && dvc repro
"""
import sys

from bnmem.command import main

if __name__ == "__main__":
    main(["audit", "init", *sys.argv[1:]])
