"""Helpers shared by the tests: fixtures' data, live servers, processes, browsers."""
