"""Programs compiled once and called again on either backend (``compiled``), the arrays their calls
leave on the devices (``device_array``), and the modes that watch calls (``comm_debug``)."""
