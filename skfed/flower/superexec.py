"""``python -m skfed.flower.superexec``: see :mod:`skfed.flower._warm`."""

from ._warm import main

if __name__ == "__main__":
    main()
