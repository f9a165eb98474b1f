"""The ``animfleet`` command: starts the fleet's long-running processes (``worker``, ``web``,
``webhooks``, ``scheduler``, ``sweeper``, ``router``), runs the operator's commands (jobs, keys,
deployments) and the embedded local fleet. The offline tools (training, simulation, the demo)
live in ``tools`` and register their commands only when one of them is asked for."""
