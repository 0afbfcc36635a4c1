"""Tuning vLLM replicas: KV-budget arithmetic, serving profiles, the ``deja tune`` grid search and
``deja doctor``'s diagnostic matrix. No web framework; the CLI lives in ``app/cli``.

Modules: :mod:`~deja.tuning.kvbudget` (bytes per token, KV tokens, full-length sequences),
:mod:`~deja.tuning.profiles` (``config/vllm-profiles.yaml``), :mod:`~deja.tuning.workload`
(length distributions, from flags or the gateway's token histograms), :mod:`~deja.tuning.grid`
(cells, results file, recommendation), :mod:`~deja.tuning.inprocess` (the simulator in
simulated time), :mod:`~deja.tuning.process` and :mod:`~deja.tuning.drive` (a replica process
per cell, driven over HTTP), :mod:`~deja.tuning.promtext` (Prometheus text),
:mod:`~deja.tuning.observe` and :mod:`~deja.tuning.doctor` (``deja doctor``).
"""
