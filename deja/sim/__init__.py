"""Simulated vLLM replica (``deja sim``) for tests, benchmarks and demos - never production.

Modules: :mod:`deja.sim.config` (``SimConfig``), :mod:`deja.sim.engine` (pure logic),
:mod:`deja.sim.metrics` (vLLM-named Prometheus metrics), :mod:`deja.sim.server`
(``create_sim_app``), :mod:`deja.sim.responses` (response bodies), :mod:`deja.sim.sse`
(streaming and disconnects), :mod:`deja.sim.runner` (``start_simulators``, ``run_simulator``) and
:mod:`app.cli.sim` (``sim_command``).
"""
