"""Training pipeline for deja's semantic-cache verifier (a MiniLM cross-encoder).

Steps: ``prep`` (split + augmentation), ``embed`` (cosine candidates, cached), ``train``,
``export`` (ONNX + dynamic int8), ``calibrate`` (thresholds on the validation split),
``evaluate`` (report on qqp_dev). ``build.py`` runs them in order.
"""
