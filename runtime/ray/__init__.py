"""The Ray backend: device processes as Ray actors, the driver that runs programs on them.

* ``start``: starting Ray (the driver) and a device worker (``bootstrap``);
* ``protocol``: what the driver and a device process say about a run (``RunPlan``, ``DeviceSummary``);
* ``host/``: the device process (``DeviceHost``), which never imports the driver side;
* ``driver/``: ``RayMesh`` (its processes, their lifetime and placement), ``HeldArrays``,
  ``RunAttempt``, failure diagnosis, repair, and ``run_ray``;
* ``nodes``: mesh axes onto cluster nodes (placement groups); ``user_entries``: the user's own
  ops shipped to the device processes; ``put_once``: one ``ray.put`` per distinct array.

The only package of simshard that imports ray, and only when a function of it is called.
"""
