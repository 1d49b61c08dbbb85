"""Finding the device processes that died or do not answer, and restarting them: a fresh host
actor for the same devices, every host told the new handles, every loaded program shipped again."""

from __future__ import annotations

from ..start import import_ray


def find_lost(mesh, timeout: float = 5.0) -> list[int]:
    """The devices of ``mesh`` whose actor is dead or does not answer within ``timeout`` seconds."""
    ray = import_ray()
    refs = {mesh.call(d, "pid"): d for d in mesh.devices}
    ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=timeout)
    mesh.calls["wait"] += 1
    gone = {d for r, d in refs.items() if r not in ready}
    for r in ready:
        try:
            ray.get(r)
        except Exception:  # RayActorError: the actor is gone
            gone.add(refs[r])
    mesh.calls["get"] += 1
    return sorted(gone)


def restart_lost(mesh, floor: int | None = None, tries: int = 3) -> list[int]:
    """Restart every lost device of ``mesh`` (``find_lost``): a fresh host actor for the lost
    device's whole process group (they shared its process), every host given the new handles (and
    ``floor``: runs below it are over, their late messages dropped), and every program loaded so
    far shipped to it again (the schedules' msgpack bytes are kept by the mesh). Returns the
    devices restarted."""
    ray = import_ray()
    floor = mesh.last_run + 1 if floor is None else floor
    restarted: list[int] = []
    for _ in range(tries):
        gone = find_lost(mesh)
        if not gone:
            return restarted
        groups = [g for g in mesh.groups if set(g) & set(gone)]
        gone = sorted(d for g in groups for d in g)
        for g in groups:
            try:
                ray.kill(mesh.actors[g[0]])  # one that did not answer
            except Exception:
                pass
            mesh.start_host(g)
        try:
            mesh.connect(groups, floor)
        except ray.exceptions.RayActorError:
            pass  # another actor died meanwhile: look again
        refs = [mesh.call(d, "load", k, *per[d]) for k, per in mesh.shipped.items() for d in gone if d in per]
        try:
            ray.get(refs)
        except ray.exceptions.RayActorError:
            pass  # another actor died meanwhile: look again
        finally:
            mesh.calls["get"] += 1
        restarted += gone
    still = find_lost(mesh)
    if still:
        raise RuntimeError(f"RayMesh.repair: devices {still} still do not answer after {tries} restarts")
    return restarted
