"""What Agent Lightning v0.x's pydantic models (agentlightning/types) take and give, as plain checks.

Each check takes the JSON of one answer, fails naming the field that model would reject (a
required field missing, a value of the wrong type or outside its Literal), and returns it. The
`*_dump` functions give a request the fields its model's `model_dump()` writes, defaults included.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

JsonObject = dict[str, Any]
Check = Callable[[Any], bool]

ROLLOUT_STATUSES = ("queuing", "preparing", "running", "failed", "succeeded", "cancelled", "requeuing")
ATTEMPT_STATUSES = ("preparing", "running", "failed", "succeeded", "unresponsive", "timeout")
WORKER_STATUSES = ("idle", "busy", "unknown")
MODES = ("train", "val", "test")


def text(value: Any) -> bool:
    return isinstance(value, str)


def number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def integer(value: Any) -> bool:
    # pydantic's int takes a float without a fraction too
    return number(value) and float(value).is_integer()


def mapping(value: Any) -> bool:
    return isinstance(value, dict)


def array(value: Any) -> bool:
    return isinstance(value, list)


def anything(_value: Any) -> bool:
    return True


def maybe(check: Check) -> Check:
    return lambda value: value is None or check(value)


def one_of(*allowed: str) -> Check:
    return lambda value: value in allowed


def list_of(check: Check) -> Check:
    return lambda value: array(value) and all(check(item) for item in value)


def nested(model: Callable[[Any], Any]) -> Check:
    """A field holding another model, whose own checks name what is wrong in it."""
    return lambda value: model(value) is not None


def fields(name: str, data: Any, required: Mapping[str, Check], defaulted: Mapping[str, Check]) -> JsonObject:
    """``data`` as ``name`` validates it: every required field present, each field present well typed."""
    assert isinstance(data, dict), f"{name}: not an object: {data!r}"
    for field, check in {**required, **defaulted}.items():
        if field in data:
            assert check(data[field]), f"{name}.{field}: {data[field]!r} is refused"
        else:
            assert field not in required, f"{name}.{field} is missing from {data!r}"
    return data


def rollout_config(data: Any) -> JsonObject:
    return fields(
        "RolloutConfig",
        data,
        {},
        {
            "timeout_seconds": maybe(number),
            "unresponsive_seconds": maybe(number),
            "max_attempts": lambda value: integer(value) and value >= 1,
            "retry_condition": list_of(one_of(*ATTEMPT_STATUSES)),
        },
    )


ROLLOUT_DEFAULTED: dict[str, Check] = {
    "end_time": maybe(number),
    "mode": maybe(one_of(*MODES)),
    "resources_id": maybe(text),
    "status": one_of(*ROLLOUT_STATUSES),
    "config": nested(rollout_config),
    "metadata": maybe(mapping),
}


def rollout(data: Any) -> JsonObject:
    return fields("Rollout", data, {"rollout_id": text, "input": anything, "start_time": number}, ROLLOUT_DEFAULTED)


def attempt(data: Any) -> JsonObject:
    required = {"rollout_id": text, "attempt_id": text, "sequence_id": integer, "start_time": number}
    defaulted = {
        "end_time": maybe(number),
        "status": one_of(*ATTEMPT_STATUSES),
        "worker_id": maybe(text),
        "last_heartbeat_time": maybe(number),
        "metadata": maybe(mapping),
    }
    return fields("Attempt", data, required, defaulted)


def attempted_rollout(data: Any) -> JsonObject:
    rollout(data)
    assert "attempt" in data, f"AttemptedRollout.attempt is missing from {data!r}"
    assert attempt(data["attempt"])["rollout_id"] == data["rollout_id"], "Inconsistent rollout_id"
    return data


def rollout_or_attempted(data: Any) -> JsonObject:
    """How the client reads a rollout of a query or get_rollout_by_id: with an `attempt` key, attempted."""
    return attempted_rollout(data) if isinstance(data, dict) and "attempt" in data else rollout(data)


def worker(data: Any) -> JsonObject:
    times = ("last_heartbeat_time", "last_dequeue_time", "last_busy_time", "last_idle_time")
    defaulted: dict[str, Check] = {
        "status": one_of(*WORKER_STATUSES),
        "heartbeat_stats": maybe(mapping),
        "current_rollout_id": maybe(text),
        "current_attempt_id": maybe(text),
        **{time: maybe(number) for time in times},
    }
    return fields("Worker", data, {"worker_id": text}, defaulted)


RESOURCE_FIELDS: dict[str, dict[str, Check]] = {
    "llm": {"endpoint": text, "model": text},
    "proxy_llm": {"endpoint": text, "model": text},
    "prompt_template": {"template": text, "engine": one_of("jinja", "f-string", "poml")},
}


def resources_update(data: Any) -> JsonObject:
    required = {"resources_id": text, "create_time": number, "update_time": number, "version": integer}
    fields("ResourcesUpdate", data, {**required, "resources": mapping}, {})
    for name, resource in data["resources"].items():
        kind = resource.get("resource_type")
        assert kind in RESOURCE_FIELDS, f"ResourcesUpdate.resources.{name}.resource_type: {kind!r} is refused"
        fields(f"ResourcesUpdate.resources.{name}", resource, RESOURCE_FIELDS[kind], {})
    return data


def span_context(data: Any) -> JsonObject:
    required = {"trace_id": text, "span_id": text, "is_remote": lambda v: isinstance(v, bool), "trace_state": mapping}
    return fields("SpanContext", data, required, {})


def trace_status(data: Any) -> JsonObject:
    return fields("TraceStatus", data, {"status_code": one_of("UNSET", "OK", "ERROR")}, {"description": maybe(text)})


def event(data: Any) -> JsonObject:
    return fields("Event", data, {"name": text, "attributes": mapping}, {"timestamp": maybe(number)})


def link(data: Any) -> JsonObject:
    return fields("Link", data, {"context": nested(span_context)}, {"attributes": maybe(mapping)})


def otel_resource(data: Any) -> JsonObject:
    return fields("OtelResource", data, {"attributes": mapping, "schema_url": text}, {})


def span(data: Any) -> JsonObject:
    # Every field of Span is required, the Optional ones too: they have no default.
    required: dict[str, Check] = {
        "rollout_id": text,
        "attempt_id": text,
        "sequence_id": integer,
        "trace_id": text,
        "span_id": text,
        "parent_id": maybe(text),
        "name": text,
        "status": nested(trace_status),
        "attributes": mapping,
        "events": list_of(nested(event)),
        "links": list_of(nested(link)),
        "start_time": maybe(number),
        "end_time": maybe(number),
        "context": maybe(nested(span_context)),
        "parent": maybe(nested(span_context)),
        "resource": nested(otel_resource),
    }
    return fields("Span", data, required, {})


def next_sequence_id(data: Any) -> int:
    fields("NextSequenceIdResponse", data, {"sequence_id": integer}, {})
    return int(data["sequence_id"])


def statistics(data: Any) -> JsonObject:
    # A TypedDict with total=False: the client casts it and checks nothing; these are its counts.
    counts = ("total_rollouts", "total_attempts", "total_spans", "total_resources", "total_workers")
    defaulted: dict[str, Check] = {"name": text, "uptime": number, **dict.fromkeys(counts, integer)}
    return fields("LightningStoreStatistics", data, {}, defaulted)


def page(data: Any, item: Callable[[Any], Any]) -> JsonObject:
    """PaginatedResult as the client builds it: items, limit, offset and total read by key."""
    fields("PaginatedResult", data, {"items": array, "limit": integer, "offset": integer, "total": integer}, {})
    data["items"] = [item(entry) for entry in data["items"]]
    return data


def rollout_config_dump(config: Mapping[str, Any] | None) -> JsonObject | None:
    """RolloutConfig(**config).model_dump(): the given fields over the model's defaults."""
    if config is None:
        return None
    defaults = {"timeout_seconds": None, "unresponsive_seconds": None, "max_attempts": 1, "retry_condition": []}
    return {**defaults, **config}


def named_resources_dump(resources: Mapping[str, Mapping[str, Any]]) -> JsonObject:
    """TypeAdapter(NamedResources).dump_python: an LLM with its api_key and sampling_parameters defaults."""
    llm_defaults = {"api_key": None, "sampling_parameters": {}}
    return {
        name: {**llm_defaults, **resource} if resource["resource_type"] in ("llm", "proxy_llm") else dict(resource)
        for name, resource in resources.items()
    }
