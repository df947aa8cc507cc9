"""GitHub's OpenAPI subset: route matching, JSON-schema validation and the spec's own examples."""

from __future__ import annotations

import copy
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from jsonschema import Draft7Validator, ValidationError
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT7

SPEC_ENV = "COMPILE_CI_GITHUB_SPEC"
_SPEC_RELATIVE = "shared/fixtures/github/openapi-ci-subset.json"
# Operations we call that the shared subset lacks (GitHub's own descriptions; paths only, refs into the subset).
SUPPLEMENT = Path(__file__).with_name("openapi-supplement.json")
_BASE_URI = "urn:compile-ci:github-openapi"
_METHODS = ("get", "post", "patch", "put", "delete")


def locate_spec(spec_path: str | os.PathLike[str] | None = None) -> Path:
    """The argument, else $COMPILE_CI_GITHUB_SPEC, else ../shared next to the repository (never copied in)."""
    if spec_path is not None:
        return Path(spec_path)
    if os.environ.get(SPEC_ENV):
        return Path(os.environ[SPEC_ENV])
    return Path(__file__).resolve().parents[4] / _SPEC_RELATIVE


@dataclass(frozen=True)
class Operation:
    """One operation of the subset, with its schemas already converted to JSON Schema."""

    operation_id: str
    method: str
    template: str
    regex: re.Pattern[str]
    path_params: dict[str, dict[str, Any]]
    query_params: dict[str, dict[str, Any]]
    request_schema: dict[str, Any] | None
    responses: dict[str, dict[str, Any] | None] = field(default_factory=dict)


def to_json_schema(node: Any, *, strict: bool = False) -> Any:
    """OpenAPI 3.0 schema -> draft 7: `nullable` adds null, local $refs become absolute.

    `strict` forbids unknown properties in inline objects: GitHub silently ignores them, and a silently
    ignored typo (`summery`) is exactly the bug the emulator exists to catch.
    """
    if isinstance(node, list):
        return [to_json_schema(item, strict=strict) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _convert_child(key, value, strict) for key, value in node.items()}
    if "$ref" in out:
        return {"$ref": _BASE_URI + out["$ref"]}
    if strict and "properties" in out and "additionalProperties" not in out:
        out["additionalProperties"] = False
    if out.pop("nullable", False):
        out = _allow_null(out)
    return out


def _convert_child(key: str, value: Any, strict: bool) -> Any:
    if key in ("properties", "patternProperties") and isinstance(value, dict):
        return {name: to_json_schema(sub, strict=strict) for name, sub in value.items()}
    if key in ("example", "examples", "description", "enum", "default", "required"):
        return value
    return to_json_schema(value, strict=strict)


def _allow_null(schema: dict[str, Any]) -> dict[str, Any]:
    if "enum" in schema and None not in schema["enum"]:
        schema["enum"] = [*schema["enum"], None]
    if isinstance(schema.get("type"), str):
        schema["type"] = [schema["type"], "null"]
        return schema
    if "type" not in schema:
        return {"anyOf": [{"type": "null"}, schema]}
    return schema


class OpenAPISpec:
    """The operations of `openapi-ci-subset.json` and of our supplement beside it, loaded once per path."""

    def __init__(self, spec_path: str | os.PathLike[str] | None = None) -> None:
        self.path = locate_spec(spec_path)
        self.doc: dict[str, Any] = json.loads(self.path.read_text(encoding="utf-8"))
        supplement = json.loads(SUPPLEMENT.read_text(encoding="utf-8"))
        for template, item in supplement["paths"].items():
            self.doc["paths"].setdefault(template, {}).update(
                {method: op for method, op in item.items() if method not in self.doc["paths"].get(template, {})})
        resource = Resource(contents=to_json_schema(self.doc), specification=DRAFT7)
        self._registry: Registry[Any] = Registry().with_resource(_BASE_URI, resource)
        self.operations: dict[str, Operation] = {}
        for template, item in self.doc["paths"].items():
            for method in _METHODS:
                if method in item:
                    op = self._operation(method.upper(), template, item[method])
                    self.operations[op.operation_id] = op

    def deref(self, node: Any) -> Any:
        """Follow OpenAPI (non-schema) `$ref`s such as `#/components/responses/not_found`."""
        while isinstance(node, dict) and "$ref" in node:
            target: Any = self.doc
            for part in node["$ref"].removeprefix("#/").split("/"):
                target = target[part]
            node = target
        return node

    def _operation(self, method: str, template: str, raw: dict[str, Any]) -> Operation:
        params = [self.deref(p) for p in raw.get("parameters", [])]
        by_place: dict[str, dict[str, dict[str, Any]]] = {"path": {}, "query": {}}
        for param in params:
            by_place.setdefault(param["in"], {})[param["name"]] = to_json_schema(param["schema"])
        regex = re.compile("^" + re.sub(r"\\\{(\w+)\\\}", r"(?P<\1>[^/]+)", re.escape(template)) + "$")
        body = self.deref(raw.get("requestBody"))
        request_schema = None
        if body:
            request_schema = to_json_schema(body["content"]["application/json"]["schema"], strict=True)
        responses = {code: self._response_schema(resp) for code, resp in raw["responses"].items()}
        return Operation(raw["operationId"], method, template, regex, by_place["path"], by_place["query"],
                         request_schema, responses)

    def _response_schema(self, response: Any) -> dict[str, Any] | None:
        content = self.deref(response).get("content", {}).get("application/json")
        return to_json_schema(content["schema"]) if content else None

    def match(self, method: str, path: str) -> tuple[str, dict[str, str]] | None:
        """(operation_id, path parameters) for a request path without query, or None."""
        for op in self.operations.values():
            found = op.regex.match(path) if op.method == method.upper() else None
            if found and self._path_params_valid(op, found.groupdict()):
                return op.operation_id, found.groupdict()
        return None

    def _path_params_valid(self, op: Operation, values: dict[str, str]) -> bool:
        return all(op.path_params[name].get("type") != "integer" or value.isdigit()
                   for name, value in values.items())

    def validate_request(self, operation_id: str, body: Any) -> list[str]:
        schema = self.operations[operation_id].request_schema
        if schema is None:
            return [] if body in (None, {}) else ["this operation takes no request body"]
        if body is None:
            return ["a JSON request body is required"]
        return self._errors(schema, body, "(body)")

    def validate_query(self, operation_id: str, query: Mapping[str, list[str]]) -> list[str]:
        """Unknown or malformed query parameters (GitHub ignores them; we want the typo reported)."""
        known = self.operations[operation_id].query_params
        errors = []
        for name, values in query.items():
            if name not in known:
                errors.append(f"unknown query parameter {name!r}")
                continue
            value: Any = values[-1]
            if known[name].get("type") == "integer":
                if not value.isdigit():
                    errors.append(f"query parameter {name!r}: {value!r} is not an integer")
                    continue
                value = int(value)
            errors += self._errors(known[name], value, f"query parameter {name!r}")
        return errors

    def validate_response(self, operation_id: str, status: int, body: Any) -> list[str]:
        responses = self.operations[operation_id].responses
        if str(status) not in responses:
            return [f"status {status} is not a documented answer of {operation_id}"]
        schema = responses[str(status)]
        if schema is None:
            return [] if body is None else [f"status {status} of {operation_id} has no body"]
        return self._errors(schema, body, "(body)")

    def _errors(self, schema: dict[str, Any], instance: Any, root: str) -> list[str]:
        validator = Draft7Validator(schema, registry=self._registry)
        found = sorted(validator.iter_errors(instance), key=lambda e: list(map(str, e.absolute_path)))
        return [f"{'/'.join(map(str, e.absolute_path)) or root}: {_describe(e)}" for e in found]

    def example(self, name: str) -> Any:
        """A deep copy of `components/examples/<name>/value`."""
        return copy.deepcopy(self.doc["components"]["examples"][name]["value"])


def _describe(error: ValidationError) -> str:
    # A failed oneOf/anyOf message repeats the whole instance; the branches' own reasons are what helps.
    if error.validator in ("oneOf", "anyOf") and error.context:
        reasons = sorted({sub.message[:200] for sub in error.context})
        return f"matches none of the allowed shapes: {'; '.join(reasons)}"
    return error.message[:500]


@lru_cache(maxsize=4)
def _load(path: Path) -> OpenAPISpec:
    return OpenAPISpec(path)


def load_spec(spec_path: str | os.PathLike[str] | None = None) -> OpenAPISpec:
    """The spec at `locate_spec(spec_path)`, parsed once per process."""
    return _load(locate_spec(spec_path).resolve())
