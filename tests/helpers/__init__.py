"""Shared code of the tests: configs, toy models, fakes, tool loading, fault injection.

Not test modules: nothing here is collected, and test modules import from here, never from
each other.
"""
