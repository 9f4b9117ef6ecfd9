"""Only the package layout; the project's metadata and dependencies are in pyproject.toml.

The Avro schemas stay at the top level of the repository (``schemas/v<N>/*.avsc``, the source
of truth); the build maps that directory into the package as ``streams._schemas``, so a wheel
or an sdist build carries them as package data (``streams/_schemas/v<N>/*.avsc``), read at run
time through importlib.resources (``streams.codec.schemas.default_schemas_dir``). An editable
install or a plain source tree reads ``schemas/`` itself.
"""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["streams", "streams.*", "traintrace", "traintrace.*"]), "streams._schemas"],
    package_dir={"streams._schemas": "schemas"},
    include_package_data=False,  # only the files below (MANIFEST.in also ships golden.jsonl, in the sdist)
    package_data={
        "streams": ["py.typed", "ui/static/*", "openlineage/facets/*.json"],
        "streams._schemas": ["v*/*.avsc"],
    },
)
