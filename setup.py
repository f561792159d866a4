# Metadata lives in setup.cfg; pip needs this file to install the project.
from setuptools import setup

setup()
