"""Rendering: analysis tables -> what people read (terminal summary, HTML reports)."""
