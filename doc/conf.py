"""Sphinx configuration for skfed. Builds fully offline (no intersphinx)."""

import skfed

project = "skfed"
author = "The skfed developers"
copyright = "2026, The skfed developers"
release = skfed.__version__
version = ".".join(release.split(".")[:2])

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
    "numpydoc",
    "sphinx_gallery.gen_gallery",
]

autosummary_generate = True
autodoc_default_options = {"members": True, "inherited-members": False}
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
# Offline build: no intersphinx inventories are fetched.
intersphinx_mapping = {}

sphinx_gallery_conf = {
    "examples_dirs": ["examples"],
    "gallery_dirs": ["auto_examples"],
    "filename_pattern": r"/plot_",
    "download_all_examples": False,
    "remove_config_comments": True,
}

html_theme = "pydata_sphinx_theme"
html_title = "skfed"
html_theme_options = {"navigation_with_keys": False}
templates_path = ["_templates"]
exclude_patterns = ["_build", "examples", "Thumbs.db", ".DS_Store"]
nitpicky = False
