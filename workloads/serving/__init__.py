"""Serving engines: vLLM run as users serve it, an OpenAI server driven by concurrent streams."""
