"""Simulated vLLM replica (``deja sim``) for tests, benchmarks and demos - never production.

A standalone program: of the project it imports only :mod:`deja.kvcache` (vLLM's block hashes
and KV-event wire format, shared with the gateway that subscribes to them), and it is the one
part of the domain package that runs its own web server (Starlette).

Modules: :mod:`deja.sim.config` (``SimConfig``), :mod:`deja.sim.engine` (tokenizer, prompts,
prefix cache, answers), :mod:`deja.sim.scheduler` (vLLM's V1 step loop), :mod:`deja.sim.cost`
and :mod:`deja.sim.gpus` (step time, GPU profiles), :mod:`deja.sim.loop` (``SimEngine``: the
scheduler in real time), :mod:`deja.sim.virtual` (the scheduler in simulated time),
:mod:`deja.sim.metrics` (vLLM-named Prometheus metrics), :mod:`deja.sim.server`
(``create_sim_app``, service routes), :mod:`deja.sim.generation` (the OpenAI endpoints),
:mod:`deja.sim.state` (shared state, faults), :mod:`deja.sim.responses` (response bodies),
:mod:`deja.sim.sse` (streaming and disconnects), :mod:`deja.sim.runner` (``start_simulators``,
``run_simulator``), :mod:`deja.sim.blocks` (vLLM's block pool), :mod:`deja.sim.kvevents` (the
KV-event publisher); the CLI is :mod:`app.cli.sim` (``sim_command``).
"""
