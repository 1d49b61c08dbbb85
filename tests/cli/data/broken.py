"""A program file with a mistake on line 4: loading it must say where, not print a traceback."""

PROGRAM = None
undefined_name + 1
