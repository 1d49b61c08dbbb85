"""The wire: messages between device processes over sockets (Unix sockets within a node, TCP
between nodes), the fast path of the Ray data plane, and the driver's control line to each
process. Standard library and numpy only (msgpack for frame headers, cloudpickle for the control
line's answers): no Ray, no compiler; an import-linter contract in pyproject.toml keeps it so.

Modules: ``frames`` (the frame protocol: ``Header``, ``Answer``), ``receiver`` (a socket's
receiving end), ``sockets`` (``Listener``, ``Connection``), ``memory_reads`` (reads of a sender's
memory, ``Lent``), ``shared_memory`` (``Ring``, ``SharedBlocks``, cleanup: ``remove_shared``),
``control_line`` (the driver's socket to each process), ``stream_parts`` (frames parsed
off a stream in as few reads as it allows), ``admission`` (who may connect to a
listener, and how many at once), ``frame_auth`` (a MAC per frame between nodes) and ``polling``
(busy-polling a device process's event loop).

A Ray actor call costs the sender and the receiver hundreds of microseconds; the schedule is
static and the processes long-lived, so each host process opens one listening socket once
(``sockets.Listener``, an abstract Unix socket: no file to clean up) and its peers on the same node
connect to it on first use (``sockets.Connection``, one per pair of processes, shared by their devices).
Every connection starts by answering the listener's challenge with the mesh's secret (HMAC of a
nonce: the secret itself never crosses the socket), which the controller hands out with the
peers' addresses: another local process cannot inject messages. A connection that has not
answered within a second is closed, and a listener holds at most ``admission.MAX_CONNECTIONS``.

A message is one frame: a sequence number, a msgpack header (run, source, destination, key, tag,
note, dtype, shape) and the array's bytes. The receiver reads a body straight into the array it
hands on (no staging copy for a large one) and answers only what the sender must hear of: a frame
its device refused ("finished", "over", an error). The sender learns that everything else arrived
from a sync frame (``Connection.sync``): answered once every frame before it on the stream has
been handed on, so one answer per connection and run replaces one per message.

A mid-sized body (``RING_MIN`` up to ``SHM_BYTES``) does not cross the socket: the frame names
its address in the sender's memory and the receiver reads it from there (``process_vm_readv``: one
copy, by the kernel) into the place it offered for it, at once or, when the frame came first,
when it receives the message (``Lent``); then it tells the sender, which keeps the array until
then. A probe on opening asks whether the kernel lets the receiver read the sender's memory (its
ptrace rules decide); where it does not, the sender copies the body into the connection's ring of
shared memory while it has room (``Ring``), the frame names the offset, and the receiver copies it
out as it hands the frame on. A large array is written
once into a file of the node's shared memory (``SharedBlocks``, one file per array however many
peers it goes to, as one Ray object serves all its readers) and the frame names the file and the
reader's slot in it; the receiver maps it read-only and hands on a view of the mapping, so its
bytes are copied once instead of twice per receiver. A receiver clears its slot when the last
view of its mapping goes; the sender writes a file again once every slot is clear, so its pages
are warm (writing fresh pages of shared memory costs several times a copy).

A receiving device may offer the place a message belongs in (``Listener``'s ``place``: a slot of
a collective's output); a body, a ring's copy or a mapped file's then goes straight there.

Between nodes the frames are the same on a TCP socket (``Listener``'s ``tcp_address``), every body
in the stream, and every frame and answer carries a MAC (HMAC-SHA256 under a key the handshake
derives from the secret and the nonce, over the frame's number on the connection and its bytes:
``frame_auth``), checked before anything of the frame is handed on: a frame changed, replayed or
forged on the network closes the connection with an error naming the peer. Headers are msgpack and
bodies raw bytes on both kinds of socket, so nothing a peer sends is ever unpickled. (The
driver's control line, which carries pickles, is an abstract Unix socket of the driver's node
only: processes of other nodes are run by Ray calls.) Ray stays the control plane (load, abort, where), but for run calls and fetches (``control_line``).
"""
