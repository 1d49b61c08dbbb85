"""What every backend shares, with no Ray, no sockets and no partitioner: the transport interface,
mailboxes, the transfer log, the collectives over a transport, the executor of one device's
schedule, and ``Execution``, what a run produced."""
