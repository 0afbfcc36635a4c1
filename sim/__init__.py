"""Simulated vLLM replica (``deja sim``) for tests, benchmarks and demos - never production.

A standalone program beside the domain, not in it: it runs its own web server (Starlette) and
imports from the project only what it must agree on with the gateway, the chat template and the
judge prompt (``deja.chat``). The domain never imports it.

Modules: :mod:`sim.config` (``SimConfig``), :mod:`sim.engine` (tokenizer, prompts,
prefix cache, answers), :mod:`sim.scheduler` (vLLM's V1 step loop), :mod:`sim.cost`
and :mod:`sim.gpus` (step time, GPU profiles), :mod:`sim.loop` (``SimEngine``: the
scheduler in real time), :mod:`sim.virtual` (the scheduler in simulated time),
:mod:`sim.metrics` (vLLM-named Prometheus metrics), :mod:`sim.server`
(``create_sim_app``, service routes), :mod:`sim.generation` (the OpenAI endpoints),
:mod:`sim.state` (shared state, faults), :mod:`sim.responses` (response bodies),
:mod:`sim.sse` (streaming and disconnects), :mod:`sim.runner` (``start_simulators``,
``run_simulator``); the CLI is :mod:`app.cli.sim` (``sim_command``).
"""
