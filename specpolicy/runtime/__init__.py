"""The engine-agnostic runtime every adapter assembles: the step controller, the assembled
``AdapterRuntime``, tensor-parallel agreement, the watchdog, traces, metrics, settings, the control
file and the warm start. It names no engine, so the simulator runs policies through it too."""
