"""The built-in simulated OpenAI-compatible endpoint (``tokrate sim``).

Imports from tokrate only physics, hardware, tomlfile, fileio and errors (an
import-linter contract): it must not measure itself with the code it is measured by.
"""
