"""The foundation: errors, settings, the cache store, the analysis configuration and cache-key code, the run spec,
machine facts, progress records. Imports nothing else of core.
"""
