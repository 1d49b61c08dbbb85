"""What users call: ``ss.run`` (``api``) over the backend registry (``backends``), and DTensor's
vocabulary (``dtensor``, public as ``simshard.dtensor``) with its redistribution (``redistribute``)."""
