"""What went wrong in a run on device processes, said as one error naming a device: a device
that died (and where its peers were waiting for it), a device's own failure before the
mismatches it caused in its peers, or a message no device received."""

from __future__ import annotations

from collections import Counter
from typing import Mapping

from ...core.collectives.prepared import note
from ...core.executor import describe
from ...core.packed_rows import unpack
from ...core.transfer_log import Transfer
from ...errors import DeviceLostError, ExecutionError, ScheduleMismatchError
from ..protocol import DeviceSummary, Status
from .held import who_said
from .probe import NotAnswering, which_devices


def lost_at_load(devices, cause: BaseException, attempts: int) -> DeviceLostError:
    devices = tuple(sorted(devices))
    return DeviceLostError(
        f"{which_devices(devices)}: Ray actor gone while the program was loading (before it ran): RayMesh.repair() restarts "
        f"it; load(..., retries=1), or retries= on a run, does it for you. Ray said: {type(cause).__name__}",
        lost=devices, attempts=attempts,
    )


def run_failure(spmd, summaries: Mapping[int, DeviceSummary], dead: Mapping[int, BaseException]) -> BaseException:
    """The error a failed run raises: the lowest dead device, with where its peers waited for it;
    else the lowest device's own failure (before the mismatches it caused in its peers)."""
    positions = {d: s.where for d, s in summaries.items()}
    if dead:
        return _device_died(spmd, summaries, dead, positions)
    errors = {d: s.error for d, s in summaries.items() if s.status is Status.ERROR}
    own = {d: e for d, e in errors.items() if not isinstance(e, ScheduleMismatchError)}
    pick = own or errors
    if pick:
        e = pick[min(pick)]
        return e if isinstance(e, BaseException) else ExecutionError(str(e))
    return ExecutionError(f"the run was aborted without an error (devices: {positions})")


def _device_died(spmd, summaries: Mapping[int, DeviceSummary], dead: Mapping[int, BaseException],
                 positions: Mapping[int, str]) -> DeviceLostError:
    d = min(dead)
    waiting = []  # (peer, instruction id) of survivors waiting for d
    for p, s in sorted(summaries.items()):
        waiting += [(p, k[0]) for src, k in s.waits if src == d]
        err = s.error
        if isinstance(err, ScheduleMismatchError) and d in getattr(err, "devices", ()) and err.instr is not None:
            waiting.append((p, err.instr))
    instr = position = None
    at = "its position is unknown (no surviving device was waiting for it)"
    if waiting:
        peer, instr = waiting[0]
        sched = spmd.schedule(d)
        position = next((i for i, ins in enumerate(sched.instrs) if ins.id == instr), None)
        what = f"[{instr}]" if position is None else f"position {position} {describe(sched.instrs[position])}"
        at = (f"it had not finished its part of instruction {what}: device {peer} was waiting for it "
              f"({positions[peer]})")
    cause = str(dead[d]).strip().splitlines()[0] if str(dead[d]).strip() else type(dead[d]).__name__
    if isinstance(dead[d], NotAnswering):
        others = f" (devices {sorted(dead)} lost)" if len(dead) > 1 else ""
        message = (f"device {d} stopped answering during the run{others}: {cause}; {at}. RayMesh.repair() "
                   "restarts it; retries= does it for you")
    else:
        others = f" (devices {sorted(dead)} died)" if len(dead) > 1 else ""
        message = f"device {d}'s Ray actor died during the run{others}; {at}. {who_said(dead[d])}: {cause}"
    return DeviceLostError(message, device=d, position=position, instr=instr, positions=positions,
                           lost=tuple(sorted(dead)))


def check_delivered(spmd, summaries: Mapping[int, DeviceSummary]) -> None:
    """A ``ScheduleMismatchError`` for the first message its receiver never took: one left in its
    mailbox when it finished, or one that reached it after it had finished (or never reached it).
    The second kind shows in the counts: every message a device took from another was sent, so
    fewer messages taken than sent over the whole run means some receiver never took one; only
    then are the transfer rows read, to name it (``never_taken``)."""
    unreceived = [(src, d, k, note) for d in spmd.devices for src, k, note in summaries[d].undelivered]
    sent = sum(n for d in spmd.devices for _, n in summaries[d].taken)
    if not unreceived and sent != sum(summaries[d].received for d in spmd.devices):
        unreceived = never_taken(spmd, summaries)
    if unreceived:
        src, d, k, note = unreceived[0]
        raise ScheduleMismatchError(
            f"schedules do not match: device {src} sent message {k} (instruction id {k[0]}, sent {note}) to "
            f"device {d}, which finished without receiving it",
            devices=(src, d), positions={src: note, d: summaries[d].where},
        )


def never_taken(spmd, summaries: Mapping[int, DeviceSummary]) -> list[tuple]:
    """(source, destination, key, where the source was) of each message sent between two devices
    and never taken by its receiver, from the devices' transfer rows (``Transfer``)."""
    rows = [Transfer._make(r) for d in spmd.devices for r in unpack(summaries[d].transfers)]
    sent = Counter((r.device, r.peer, tuple(r.key)) for r in rows if r.direction == "sent" and r.device != r.peer)
    taken = Counter((r.peer, r.device, tuple(r.key)) for r in rows if r.direction == "received" and r.device != r.peer)
    return [(src, dst, key, sent_at(spmd.schedule(src), key[0])) for (src, dst, key) in sorted(sent - taken)]


def sent_at(schedule, instr: int) -> str:
    """Where a device was when it sent a message of instruction ``instr``, as its note says it
    (``prepared.note``): the instruction's position in the schedule, or inside a loop or branch."""
    for position, ins in enumerate(schedule.instrs):
        if ins.id == instr:
            return note(position, ins)
    return f"in a loop or branch of its schedule, instruction id {instr}"