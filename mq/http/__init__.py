"""Arrives in a later issue; the package exists so the layer contracts hold."""
