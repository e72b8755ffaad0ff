"""Checks that an uploaded file is what it claims to be before anything is stored."""
