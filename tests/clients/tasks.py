"""The MCP tasks extension (`io.modelcontextprotocol/tasks`, SEP-2663) for the
official Python SDK's client, through its own extension interface
(`mcp.client.extension`): the SDK has the hooks (per-request capability ads,
claimed result shapes, the `Mcp-Name` header of `tasks/*`), and the
extension's wire shapes are written here from the extension's
specification.

`TasksExtension(poll=...)` passed to `Client(extensions=[...])` makes the
client declare the extension on every request; a `tools/call` answered with
a task then resolves by polling `tasks/get` until the task ends, so
`call_tool` returns the tool's result as without tasks. Tests that want the
handle itself call with `allow_claimed=True` and use `get`/`cancel`/`update`.
"""

from __future__ import annotations

import time
from typing import Any, Literal

import anyio
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp_types import CallToolResult, Request, RequestParams, Result
from pydantic import ConfigDict

TASKS = "io.modelcontextprotocol/tasks"
TERMINAL = {"completed", "failed", "cancelled"}


class TaskFields(Result):
    """The fields every task shape carries."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)
    task_id: str
    status: str
    status_message: str | None = None
    created_at: str
    last_updated_at: str
    ttl_ms: int | None
    poll_interval_ms: int | None = None


class CreateTaskResult(TaskFields):
    """`resultType: "task"`: the handle a `tools/call` may be answered with."""

    result_type: Literal["task"]


class DetailedTask(TaskFields):
    """A `tasks/get` answer: the task, and its result or error once it ends."""

    result_type: str | None = None
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    input_requests: dict[str, Any] | None = None


class Ack(Result):
    """The empty acknowledgement of `tasks/update` and `tasks/cancel`."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)
    result_type: str | None = None


class TaskParams(RequestParams):
    task_id: str


class UpdateTaskParams(RequestParams):
    task_id: str
    input_responses: dict[str, Any]


class GetTask(Request[TaskParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    params: TaskParams
    name_param = "taskId"


class CancelTask(Request[TaskParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    params: TaskParams
    name_param = "taskId"


class UpdateTask(Request[UpdateTaskParams, Literal["tasks/update"]]):
    method: Literal["tasks/update"] = "tasks/update"
    params: UpdateTaskParams
    name_param = "taskId"


async def get(session, task_id) -> DetailedTask:
    return await session.send_request(GetTask(params=TaskParams(task_id=task_id)), DetailedTask)


async def cancel(session, task_id) -> Ack:
    return await session.send_request(CancelTask(params=TaskParams(task_id=task_id)), Ack)


async def update(session, task_id, responses) -> Ack:
    params = UpdateTaskParams(task_id=task_id, input_responses=responses)
    return await session.send_request(UpdateTask(params=params), Ack)


async def wait(session, task_id, limit_s=30.0, every_s=None) -> DetailedTask:
    """Polls `tasks/get` until the task ends: at the task's `pollIntervalMs`,
    or every `every_s` to time how fast it ends."""
    deadline = time.monotonic() + limit_s
    while True:
        task = await get(session, task_id)
        if task.status in TERMINAL:
            return task
        assert time.monotonic() < deadline, f"task {task_id} still {task.status}"
        await anyio.sleep(every_s or (task.poll_interval_ms or 1000) / 1000)


class TasksExtension(ClientExtension):
    """Declares the tasks extension; resolves a task handle by polling.
    `handles` collects every handle seen, and `polls` counts `tasks/get`."""

    identifier = TASKS

    def __init__(self):
        self.handles: list[CreateTaskResult] = []

    def claims(self):
        return [ResultClaim(result_type="task", model=CreateTaskResult, resolve=self._resolve)]

    async def _resolve(self, handle: CreateTaskResult, ctx: ClaimContext) -> CallToolResult:
        self.handles.append(handle)
        task = await wait(ctx.session, handle.task_id)
        if task.status == "completed":
            return CallToolResult.model_validate(task.result)
        raise RuntimeError(f"task {handle.task_id} ended {task.status}: {task.status_message}")
