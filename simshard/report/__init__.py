"""Reports of a run (compiler side, no Ray): communication, memory and bitwise verification.

* ``CommReport`` of ``CommRecord``s (one per collective instruction per device), tables by op /
  collective / mesh axis / device, JSON, and an alpha-beta time estimate under a ``Topology``;
* ``MemoryReport``: peak live bytes per device;
* ``VerifyReport``: outputs compared bit for bit with a reference;
* ``exact_inputs``: integer-valued float inputs that keep every sum exact.
"""

from .collective_cost import analytic_min_bytes, balanced_chunks
from .comm import CommRecord, CommReport, TimeEstimate
from .inputs import exact_inputs, exact_magnitude
from .topology import Link, Topology
from .memory import DeviceMemory, MemoryReport
from .reading import ReportFormatError
from ..units import fmt_bytes, fmt_rate, fmt_seconds
from .opcheck import check_ops
from .verify import Check, VerifyReport, bit_equal, compare, ulp_distance

__all__ = [
    "Check", "CommRecord", "CommReport", "DeviceMemory", "Link", "MemoryReport", "ReportFormatError", "TimeEstimate", "Topology",
    "VerifyReport", "analytic_min_bytes", "balanced_chunks", "bit_equal", "check_ops", "compare", "exact_inputs",
    "exact_magnitude", "fmt_bytes", "fmt_rate", "fmt_seconds", "ulp_distance",
]
