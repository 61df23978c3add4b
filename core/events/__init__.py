"""core/events: event buses, rules (filter patterns, transforms), targets, delivery.

Filled in step by step (issue 15); see each module's docstring.
"""
