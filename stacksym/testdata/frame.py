# frame.py: prints where its function stands (code object address, last
# instruction in bytes, line) and waits for a line on stdin, so that a
# test can read its memory while it lives.
import sys


def step():
    f = sys._getframe()
    print(id(f.f_code), f.f_lasti, f.f_lineno, flush=True)  # the line reported
    sys.stdin.readline()


step()
