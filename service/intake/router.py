"""The one routing point: handlers registered per (event, action), sub-routers merged at the root."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from service.intake.shapes import shape_problem


@dataclass(frozen=True)
class Event:
    name: str  # X-GitHub-Event
    delivery_id: str
    payload: dict[str, Any]

    @property
    def action(self) -> str | None:
        action = self.payload.get("action")
        return action if isinstance(action, str) else None


class BadPayload(ValueError):
    """The payload lacks something its handler needs (answered 400)."""


@dataclass(frozen=True)
class Outcome:
    """What a handler did, for the webhook's response body and the log."""

    message: str
    run_id: str | None = None


class Deps(Protocol):
    """What handlers may use; wired in create_app."""


Handler = Callable[[Event, Any], Outcome]


class Router:
    def __init__(self, *others: Router) -> None:
        self._routes: dict[tuple[str, str | None], list[Handler]] = {}
        for other in others:
            for key, handlers in other._routes.items():
                self._routes.setdefault(key, []).extend(handlers)

    def register(self, event: str, *actions: str) -> Callable[[Handler], Handler]:
        """Register for the given actions, or for every action of the event when none are named."""

        def decorate(handler: Handler) -> Handler:
            for action in actions or (None,):
                self._routes.setdefault((event, action), []).append(handler)
            return handler

        return decorate

    def handlers_for(self, event: Event) -> list[Handler]:
        exact = self._routes.get((event.name, event.action), []) if event.action is not None else []
        return [*exact, *self._routes.get((event.name, None), [])]

    def dispatch(self, event: Event, deps: Any) -> list[Outcome]:
        return [handler(event, deps) for handler in self.handlers_for(event)]


def field(payload: dict[str, Any], dotted: str, kind: type | tuple[type, ...]) -> Any:
    """payload['a']['b'] for 'a.b', or BadPayload naming what is missing, of the wrong type or not GitHub's shape."""
    value: Any = payload
    for part in dotted.split("."):
        if not isinstance(value, dict) or part not in value:
            raise BadPayload(f"payload has no {dotted}")
        value = value[part]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise BadPayload(f"payload field {dotted} has the wrong type")
    problem = shape_problem(dotted, value)
    if problem:
        raise BadPayload(f"payload field {dotted} {problem}")
    return value
