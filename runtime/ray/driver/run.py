"""``run_ray``: one program on device processes, the Ray backend's counterpart of ``run_local``:
fresh device actors for the run (or a kept ``RayMesh``), outputs fetched before they go."""

from __future__ import annotations

from typing import Sequence

from .mesh import RayMesh


def mesh_of(spmd):
    """The mesh of the program's in or out shardings (None if none names one)."""
    for s in (*spmd.in_shardings, *spmd.out_shardings):
        mesh = getattr(s, "mesh", None)
        if mesh is not None:
            return mesh
    return None


def run_ray(spmd, inputs, *, address: str | None = None, node_axes: Sequence[str] | str | None = None, mesh=None,
            device_memory=None, timeout: float | None = 10.0, algorithm: str = "direct", trace_values: bool = False,
            retries: int = 0, progress=None, ray_mesh: "RayMesh | None" = None, **mesh_options):
    """``run_local``'s counterpart: fresh device actors for one run (outputs fetched before they go).
    ``node_axes`` (with the program's mesh, or ``mesh=``) places them on nodes (``RayMesh``);
    ``retries``: see ``RayMesh.execute``; ``mesh_options`` are ``RayMesh``'s keyword options
    (``actor_cpus``, ``node_strategy``, ...); ``progress(stage)`` is told when the actors start and
    when the run starts. ``ray_mesh``: run on these device actors instead (kept alive; the program
    is loaded for this run and unloaded after it)."""
    say = progress or (lambda stage: None)
    run = dict(device_memory=device_memory, timeout=timeout, algorithm=algorithm, trace_values=trace_values,
               retries=retries)
    if ray_mesh is not None:
        if address is not None or node_axes is not None or mesh_options:
            raise ValueError("run_ray: with ray_mesh= the actors exist already; address=, node_axes= and actor "
                             "options belong to the RayMesh")
        missing = sorted(set(spmd.devices) - set(ray_mesh.devices))
        if missing:
            raise ValueError(f"run_ray: the program runs on devices {missing}, which the given RayMesh does not hold")
        return run_once(ray_mesh, spmd, inputs, say, keep=True, **run)
    if node_axes is not None:
        mesh = mesh or mesh_of(spmd)
        if mesh is None:
            raise ValueError("run_ray: node_axes= needs the mesh; pass mesh=")
        m = RayMesh(mesh, address, node_axes, devices=spmd.devices, **mesh_options)
    else:
        m = RayMesh(devices=spmd.devices, address=address, **mesh_options)
    try:
        return run_once(m, spmd, inputs, say, keep=False, **run)
    finally:
        m.close()


def run_once(m: RayMesh, spmd, inputs, say, *, keep: bool, device_memory, timeout, algorithm, trace_values,
              retries):
    """Load ``spmd`` on ``m`` (started first if need be), run it, fetch its outputs; a mesh that
    is ``keep``-t drops the program again after the run."""
    if not m.actors:
        say(f"starting {len(m.devices)} Ray device actors")
        m.start()
    key = m.load(spmd, device_memory=device_memory, timeout=timeout, algorithm=algorithm, retries=retries)
    try:
        say(f"running on {len(spmd.devices)} Ray device actors")
        ex = m.execute(key, spmd, inputs, trace_values=trace_values, retries=retries)
        ex.outputs.fetch()
        return ex
    finally:
        if keep:
            m.unload(key)
