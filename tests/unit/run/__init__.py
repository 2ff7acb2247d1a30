"""Unit tests of running executables: the step loop, backends' traits, the CLI and API, inputs,
reports, shards' plans."""
