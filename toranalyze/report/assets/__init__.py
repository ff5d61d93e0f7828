"""Data of the reports: the stylesheet and the secret patterns (a package so the wheel carries them)."""
