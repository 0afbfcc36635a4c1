"""Tuning vLLM replicas: KV-budget arithmetic, serving profiles, the ``deja tune`` grid search and
``deja doctor``'s diagnostic matrix: offline tools beside the domain (the domain never imports
them). No web framework; the CLI lives in ``app/cli``.

Modules: :mod:`~tuning.kvbudget` (bytes per token, KV tokens, full-length sequences),
:mod:`~tuning.profiles` (``config/vllm-profiles.yaml``), :mod:`~tuning.workload`
(length distributions, from flags or the gateway's token histograms), :mod:`~tuning.grid`
(cells, results file, recommendation), :mod:`~tuning.inprocess` (the simulator in
simulated time), :mod:`~tuning.process` and :mod:`~tuning.drive` (a replica process
per cell, driven over HTTP), :mod:`~tuning.promtext` (Prometheus text),
:mod:`~tuning.observe` and :mod:`~tuning.doctor` (``deja doctor``).
"""
