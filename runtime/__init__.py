"""The executor (imported as ``simshard.runtime``): local and Ray backends run SPMD schedules.

It imports the compiler's data types; the compiler never imports it.
"""
