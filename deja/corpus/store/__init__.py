"""Chunk stores: the interface (``base``), Qdrant Edge (``edge``), a Qdrant server (``qdrant``)."""
