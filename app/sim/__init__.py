"""Simulated vLLM replica (``deja sim``) for tests, benchmarks and demos - never production.

Modules: :mod:`app.sim.config` (``SimConfig``), :mod:`app.sim.engine` (pure logic),
:mod:`app.sim.metrics` (vLLM-named Prometheus metrics), :mod:`app.sim.server`
(``create_sim_app``), :mod:`app.sim.responses` (response bodies), :mod:`app.sim.sse`
(streaming and disconnects), :mod:`app.sim.runner` (``start_simulators``, ``run_simulator``) and
:mod:`app.sim.cli` (``sim_command``).
"""
