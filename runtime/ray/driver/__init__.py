"""The driver side of the Ray backend: ``RayMesh`` (``mesh``) and what it is made of: the arrays its
processes keep (``arrays``, ``held``), the control lines (``lines``), one run attempt
(``attempt``, over ``routes``), what a failure means (``failures``), restarting lost devices
(``repair``), process sizing (``groups``), and ``run_ray`` (``run``)."""
