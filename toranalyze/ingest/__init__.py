"""Ingest: files -> one typed, classified event table."""
