"""A stand-in for the Slack Web API, served over real HTTP from a thread of the test process, as
strict as Slack about what it is sent: the methods the product uses, the bot token
(`Authorization: Bearer`, never in the arguments) and the app's scopes, the body each method
takes (a JSON body, `Content-Type: application/json`, for the write methods, by POST; form
arguments for `users.info`, which Slack documents as taking no JSON: a query string by GET or an
`application/x-www-form-urlencoded` body by POST), each method's required arguments, and the
Block Kit shapes and limits of messages and modals. It answers as Slack does (HTTP 200 with
`{"ok": false, "error": ...}`), keeps the channels' messages, so a test reads what people would
see, and knows the workspace's members a test adds (`member_add`), for `users.info`.

It also plays Slack's side of interactions: `block_actions` / `view_submission` payloads signed
with the app's signing secret exactly as Slack documents (`v0:<timestamp>:<body>`, HMAC-SHA256),
each with a fresh `trigger_id` that `views.open` accepts once, within three seconds.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import secrets
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlencode

from tests.serving import serve_in_thread

BOT_TOKEN = "xoxb-1111-2222-standinbottoken"
SIGNING_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
TEAM_ID = "T0STANDIN"
CHANNEL = "C0APPROVALS"

# The scopes of the bot token: what the product's Slack app asks for (docs/notifications.md).
APP_SCOPES = frozenset({"chat:write", "users:read", "users:read.email"})
# Methods that take form arguments only (users.info: "does not currently accept
# application/json"), and the scope each method needs.
FORM_METHODS = frozenset({"users.info"})
METHOD_SCOPES = {
    "chat.postMessage": "chat:write",
    "chat.update": "chat:write",
    "users.info": "users:read",
}

TEXT_TYPES = {"plain_text", "mrkdwn"}
BLOCK_TYPES = {"header", "section", "actions", "context", "divider", "input"}


class Invalid(Exception):
    """The call breaks one of Slack's rules; `error` is Slack's error code, `fields` what Slack
    adds to the answer (`needed` and `provided` of a missing scope)."""

    def __init__(self, error: str, detail: str = "", **fields: str) -> None:
        super().__init__(f"{error}: {detail}")
        self.error = error
        self.detail = detail
        self.fields = fields


def _need(condition: bool, error: str, detail: str) -> None:
    if not condition:
        raise Invalid(error, detail)


def _text_object(value: Any, where: str, limit: int, *, plain_only: bool = False) -> None:
    _need(isinstance(value, dict), "invalid_blocks", f"{where} must be a text object")
    kinds = {"plain_text"} if plain_only else TEXT_TYPES
    _need(value.get("type") in kinds, "invalid_blocks", f"{where}.type must be one of {kinds}")
    text = value.get("text")
    _need(
        isinstance(text, str) and 0 < len(text) <= limit,
        "invalid_blocks",
        f"{where}.text must be 1 to {limit} characters",
    )
    extra = set(value) - {"type", "text", "emoji", "verbatim"}
    _need(not extra, "invalid_blocks", f"{where} has unknown fields {extra}")


def _button(element: dict[str, Any], where: str, action_ids: set[str]) -> None:
    _text_object(element.get("text"), f"{where}.text", 75, plain_only=True)
    action_id = element.get("action_id")
    _need(
        isinstance(action_id, str) and 0 < len(action_id) <= 255,
        "invalid_blocks",
        f"{where}.action_id must be 1 to 255 characters",
    )
    _need(action_id not in action_ids, "invalid_blocks", f"{where}: duplicate action_id")
    action_ids.add(action_id)
    if "value" in element:
        _need(
            isinstance(element["value"], str) and len(element["value"]) <= 2000,
            "invalid_blocks",
            f"{where}.value must be at most 2000 characters",
        )
    if "url" in element:
        _need(
            isinstance(element["url"], str)
            and len(element["url"]) <= 3000
            and element["url"].startswith(("http://", "https://")),
            "invalid_blocks",
            f"{where}.url must be an http(s) URL of at most 3000 characters",
        )
    _need(
        element.get("style", "primary") in ("primary", "danger"),
        "invalid_blocks",
        f"{where}.style must be primary or danger",
    )
    if "confirm" in element:
        confirm = element["confirm"]
        _text_object(confirm.get("title"), f"{where}.confirm.title", 100, plain_only=True)
        _text_object(confirm.get("text"), f"{where}.confirm.text", 300)
        _text_object(confirm.get("confirm"), f"{where}.confirm.confirm", 30, plain_only=True)
        _text_object(confirm.get("deny"), f"{where}.confirm.deny", 30, plain_only=True)
    extra = set(element) - {"type", "text", "action_id", "value", "url", "style", "confirm"}
    _need(not extra, "invalid_blocks", f"{where} has unknown fields {extra}")


def blocks_check(blocks: Any, *, limit: int, surface: str) -> None:
    """Slack's rules for a list of layout blocks on a message (50) or a modal (100)."""
    _need(
        isinstance(blocks, list) and len(blocks) <= limit,
        "invalid_blocks",
        f"blocks must be a list of at most {limit}",
    )
    block_ids: set[str] = set()
    action_ids: set[str] = set()
    for n, block in enumerate(blocks):
        where = f"blocks[{n}]"
        _need(
            isinstance(block, dict) and block.get("type") in BLOCK_TYPES,
            "invalid_blocks",
            f"{where}.type must be one of {sorted(BLOCK_TYPES)}",
        )
        if "block_id" in block:
            block_id = block["block_id"]
            _need(
                isinstance(block_id, str) and 0 < len(block_id) <= 255,
                "invalid_blocks",
                f"{where}.block_id must be 1 to 255 characters",
            )
            _need(block_id not in block_ids, "invalid_blocks", f"{where}: duplicate block_id")
            block_ids.add(block_id)
        kind = block["type"]
        if kind == "header":
            _text_object(block.get("text"), f"{where}.text", 150, plain_only=True)
        elif kind == "section":
            _text_object(block.get("text"), f"{where}.text", 3000)
        elif kind == "context":
            elements = block.get("elements")
            _need(
                isinstance(elements, list) and 0 < len(elements) <= 10,
                "invalid_blocks",
                f"{where}.elements must hold 1 to 10",
            )
            for m, element in enumerate(elements):
                _text_object(element, f"{where}.elements[{m}]", 3000)
        elif kind == "actions":
            elements = block.get("elements")
            _need(
                isinstance(elements, list) and 0 < len(elements) <= 25,
                "invalid_blocks",
                f"{where}.elements must hold 1 to 25",
            )
            for m, element in enumerate(elements):
                _need(
                    isinstance(element, dict) and element.get("type") == "button",
                    "invalid_blocks",
                    f"{where}.elements[{m}] must be a button",
                )
                _button(element, f"{where}.elements[{m}]", action_ids)
        elif kind == "input":
            _need(surface == "modal", "invalid_blocks", f"{where}: input blocks are for modals")
            _text_object(block.get("label"), f"{where}.label", 2000, plain_only=True)
            element = block.get("element")
            _need(
                isinstance(element, dict) and element.get("type") == "plain_text_input",
                "invalid_blocks",
                f"{where}.element must be a plain_text_input",
            )
            _need(
                isinstance(element.get("action_id"), str),
                "invalid_blocks",
                f"{where}.element.action_id is required",
            )
            _need(
                0 < element.get("max_length", 3000) <= 3000,
                "invalid_blocks",
                f"{where}.element.max_length must be 1 to 3000",
            )


@dataclass
class Message:
    channel: str
    ts: str
    text: str
    blocks: list[dict[str, Any]]
    updates: int = 0

    def block_text(self) -> str:
        """Every text of the message's blocks, joined (what a person reads)."""
        texts: list[str] = []

        def walk(value: Any) -> None:
            if isinstance(value, dict):
                if value.get("type") in TEXT_TYPES and isinstance(value.get("text"), str):
                    texts.append(value["text"])
                for inner in value.values():
                    walk(inner)
            elif isinstance(value, list):
                for inner in value:
                    walk(inner)

        walk(self.blocks)
        return "\n".join(texts)

    def action_ids(self) -> list[str]:
        return [
            element.get("action_id", "")
            for block in self.blocks
            if block.get("type") == "actions"
            for element in block["elements"]
        ]


@dataclass
class StandInSlack:
    """The Web API's state: channels the bot is in, their messages, issued trigger ids, the
    modals opened, every call received (method, JSON body) and every refusal."""

    url: str = ""
    scopes: set[str] = field(default_factory=lambda: set(APP_SCOPES))
    channels: set[str] = field(default_factory=lambda: {CHANNEL})
    # The workspace's members by user id: Slack's user objects (`member_add`).
    members: dict[str, dict[str, Any]] = field(default_factory=dict)
    messages: dict[tuple[str, str], Message] = field(default_factory=dict)
    triggers: dict[str, float] = field(default_factory=dict)
    views: list[dict[str, Any]] = field(default_factory=list)
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    refusals: list[tuple[str, str, str]] = field(default_factory=list)
    # Seconds to wait before answering (a slow Slack), and a status to answer instead (an outage).
    delay: float = 0.0
    outage_status: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    _ts: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    # -- the Web API ------------------------------------------------------------------------

    def answer(
        self,
        method: str,
        headers: dict[str, str],
        body: bytes,
        *,
        verb: str = "POST",
        query: str = "",
    ) -> dict[str, Any]:
        """Slack's answer to `verb` (GET or POST) of `method` with these headers, body and query
        string; raises Invalid with Slack's error."""
        if headers.get("authorization") is None:
            raise Invalid("not_authed", "no Authorization header")
        if headers["authorization"] != f"Bearer {BOT_TOKEN}":
            raise Invalid("invalid_auth", "the token is not the bot's")
        handler = {
            "chat.postMessage": self._post,
            "chat.update": self._update,
            "views.open": self._open,
            "users.info": self._user_info,
        }.get(method)
        _need(handler is not None, "unknown_method", method)
        assert handler is not None
        if method in FORM_METHODS:
            args = self._form_arguments(method, headers, body, verb=verb, query=query)
        else:
            _need(verb == "POST", "invalid_request", f"{method} is called by POST here")
            args = self._json_arguments(headers, body)
        _need(
            "token" not in args, "invalid_arguments", "the token goes in the Authorization header"
        )
        needed = METHOD_SCOPES.get(method)
        if needed is not None and needed not in self.scopes:
            raise Invalid(
                "missing_scope", method, needed=needed, provided=",".join(sorted(self.scopes))
            )
        with self.lock:
            self.calls.append((method, args))
            return handler(args)

    def _json_arguments(self, headers: dict[str, str], body: bytes) -> dict[str, Any]:
        content_type = headers.get("content-type", "")
        _need(
            content_type.split(";")[0].strip() == "application/json",
            "invalid_form_data",
            f"Content-Type {content_type!r} is not application/json",
        )
        try:
            args = json.loads(body.decode())
        except ValueError:
            raise Invalid("invalid_json", "the body is not JSON") from None
        _need(isinstance(args, dict), "invalid_json", "the body is not an object")
        assert isinstance(args, dict)
        return args

    def _form_arguments(
        self, method: str, headers: dict[str, str], body: bytes, *, verb: str, query: str
    ) -> dict[str, Any]:
        """The arguments of a method that takes no JSON: the query string of a GET, or the
        form-encoded body of a POST. Slack reads no arguments from a JSON body here (so a
        required one is missing), and refuses a POST with another content type."""
        if verb == "GET":
            return dict(parse_qsl(query, keep_blank_values=True))
        content_type = headers.get("content-type", "").split(";")[0].strip()
        if content_type == "application/json":
            self.refusals.append((method, "json_ignored", f"{method} takes no JSON arguments"))
            return {}
        _need(
            content_type == "application/x-www-form-urlencoded",
            "invalid_post_type",
            f"Content-Type {content_type!r} is not a form",
        )
        try:
            return dict(parse_qsl(body.decode(), keep_blank_values=True, strict_parsing=bool(body)))
        except (UnicodeDecodeError, ValueError):
            raise Invalid("invalid_form_data", "the body is not a form") from None

    # -- members and users.info -----------------------------------------------------------

    def member_add(
        self,
        user_id: str,
        *,
        email: str,
        team_id: str = TEAM_ID,
        deleted: bool = False,
        is_bot: bool = False,
    ) -> None:
        """A member of the workspace, as `users.info` describes one."""
        self.members[user_id] = {
            "id": user_id,
            "team_id": team_id,
            "name": user_id.lower(),
            "deleted": deleted,
            "is_bot": is_bot,
            "profile": {"display_name": user_id.lower(), "email": email, "team": team_id},
        }

    def _user_info(self, args: dict[str, Any]) -> dict[str, Any]:
        user_id = args.get("user")
        _need(isinstance(user_id, str) and bool(user_id), "user_not_found", "no user argument")
        member = self.members.get(str(user_id))
        _need(member is not None, "user_not_found", str(user_id))
        assert member is not None
        user = json.loads(json.dumps(member))
        if "users:read.email" not in self.scopes:
            # Without the scope Slack leaves the email out; it is no error.
            user["profile"].pop("email", None)
        return {"ok": True, "user": user}

    def _message_content(self, args: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
        text, blocks = args.get("text", ""), args.get("blocks")
        _need(bool(text) or bool(blocks), "no_text", "text or blocks is required")
        _need(isinstance(text, str) and len(text) <= 40_000, "msg_too_long", "text too long")
        if blocks is not None:
            blocks_check(blocks, limit=50, surface="message")
        return text, blocks or []

    def _channel(self, args: dict[str, Any]) -> str:
        channel = args.get("channel")
        _need(isinstance(channel, str) and bool(channel), "channel_not_found", "no channel")
        _need(channel in self.channels, "channel_not_found", str(channel))
        return str(channel)

    def _post(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = self._channel(args)
        text, blocks = self._message_content(args)
        ts = f"{int(time.time())}.{next(self._ts):06d}"
        self.messages[(channel, ts)] = Message(channel, ts, text, blocks)
        return {"ok": True, "channel": channel, "ts": ts, "message": {"text": text}}

    def _update(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = self._channel(args)
        ts = args.get("ts")
        _need(isinstance(ts, str), "invalid_arguments", "ts is required, as a string")
        message = self.messages.get((channel, str(ts)))
        _need(message is not None, "message_not_found", f"{channel} {ts}")
        assert message is not None
        message.text, message.blocks = self._message_content(args)
        message.updates += 1
        return {"ok": True, "channel": channel, "ts": ts, "text": message.text}

    def _open(self, args: dict[str, Any]) -> dict[str, Any]:
        trigger = args.get("trigger_id")
        _need(
            isinstance(trigger, str) and trigger in self.triggers,
            "invalid_trigger_id",
            str(trigger),
        )
        issued = self.triggers.pop(str(trigger))
        _need(time.monotonic() - issued <= 3.0, "expired_trigger_id", str(trigger))
        view = args.get("view")
        _need(
            isinstance(view, dict) and view.get("type") == "modal",
            "invalid_arguments",
            "view must be a modal",
        )
        _text_object(view.get("title"), "view.title", 24, plain_only=True)
        blocks_check(view.get("blocks"), limit=100, surface="modal")
        has_input = any(block.get("type") == "input" for block in view["blocks"])
        if has_input:
            _text_object(view.get("submit"), "view.submit", 24, plain_only=True)
        _need(
            len(view.get("private_metadata", "")) <= 3000,
            "invalid_arguments",
            "private_metadata is longer than 3000 characters",
        )
        _need(len(view.get("callback_id", "")) <= 255, "invalid_arguments", "callback_id long")
        self.views.append(view)
        return {"ok": True, "view": {"id": f"V{len(self.views):08d}", **view}}

    # -- Slack's side of interactions ------------------------------------------------------

    def trigger(self) -> str:
        trigger_id = (
            f"{secrets.randbelow(10**10)}.{secrets.randbelow(10**10)}.{secrets.token_hex(16)}"
        )
        self.triggers[trigger_id] = time.monotonic()
        return trigger_id

    def click(
        self, message: Message, action_id: str, *, user: str, name: str = ""
    ) -> dict[str, Any]:
        """The `block_actions` payload of `user` clicking the button `action_id` of `message`."""
        block, button = next(
            (block, element)
            for block in message.blocks
            if block.get("type") == "actions"
            for element in block["elements"]
            if element.get("action_id") == action_id
        )
        return {
            "type": "block_actions",
            "user": {
                "id": user,
                "username": name or user.lower(),
                "name": name or user.lower(),
                "team_id": TEAM_ID,
            },
            "api_app_id": "A0STANDIN",
            "token": "deprecated-verification-token",
            "container": {
                "type": "message",
                "message_ts": message.ts,
                "channel_id": message.channel,
                "is_ephemeral": False,
            },
            "trigger_id": self.trigger(),
            "team": {"id": TEAM_ID, "domain": "standin"},
            "channel": {"id": message.channel, "name": "approvals"},
            "message": {
                "type": "message",
                "ts": message.ts,
                "text": message.text,
                "blocks": message.blocks,
            },
            "response_url": "https://hooks.slack.com/actions/T0STANDIN/1/standin",
            "actions": [
                {
                    "action_id": action_id,
                    "block_id": block.get("block_id", "b"),
                    "text": button["text"],
                    "value": button.get("value", ""),
                    "type": "button",
                    "action_ts": f"{time.time():.6f}",
                }
            ],
        }

    def submit(self, view: dict[str, Any], *, user: str, reason: str) -> dict[str, Any]:
        """The `view_submission` payload of `user` submitting the modal `view` with `reason`."""
        values = {
            block["block_id"]: {
                block["element"]["action_id"]: {"type": "plain_text_input", "value": reason or None}
            }
            for block in view["blocks"]
            if block.get("type") == "input"
        }
        return {
            "type": "view_submission",
            "team": {"id": TEAM_ID, "domain": "standin"},
            "user": {
                "id": user,
                "username": user.lower(),
                "name": user.lower(),
                "team_id": TEAM_ID,
            },
            "api_app_id": "A0STANDIN",
            "trigger_id": self.trigger(),
            "view": {
                "id": "V0000001",
                "type": "modal",
                "team_id": TEAM_ID,
                "callback_id": view.get("callback_id", ""),
                "private_metadata": view.get("private_metadata", ""),
                "state": {"values": values},
                "blocks": view["blocks"],
            },
        }

    def only_message(self) -> Message:
        (message,) = self.messages.values()
        return message


def signed(
    payload: dict[str, Any] | str, *, secret: str = SIGNING_SECRET, timestamp: int | None = None
) -> tuple[bytes, dict[str, str]]:
    """The body and headers of an interaction request as Slack sends it (the payload's JSON, or
    `payload` itself when it is text), signed with the reference implementation (slack-sdk's
    SignatureVerifier)."""
    from slack_sdk.signature import SignatureVerifier

    text = payload if isinstance(payload, str) else json.dumps(payload)
    body = urlencode({"payload": text}).encode()
    stamp = str(int(time.time()) if timestamp is None else timestamp)
    signature = SignatureVerifier(secret).generate_signature(timestamp=stamp, body=body)
    assert signature is not None
    return body, {
        "HTTP_X_SLACK_REQUEST_TIMESTAMP": stamp,
        "HTTP_X_SLACK_SIGNATURE": signature,
    }


def serve() -> tuple[StandInSlack, ThreadingHTTPServer]:
    """Start the stand-in on a free port; the caller shuts the server down."""
    slack = StandInSlack()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self._answer("POST", self.rfile.read(int(self.headers.get("Content-Length", "0"))))

        def do_GET(self) -> None:
            self._answer("GET", b"")

        def _answer(self, verb: str, body: bytes) -> None:
            if slack.delay:
                time.sleep(slack.delay)
            if slack.outage_status:
                self._send(slack.outage_status, {"ok": False, "error": "service_unavailable"})
                return
            path, _, query = self.path.partition("?")
            method = path.rpartition("/")[2]
            headers = {name.lower(): value for name, value in self.headers.items()}
            try:
                answer = slack.answer(method, headers, body, verb=verb, query=query)
            except Invalid as exc:
                slack.refusals.append((method, exc.error, exc.detail))
                answer = {"ok": False, "error": exc.error, **exc.fields}
            self._send(200, answer)

        def _send(self, status: int, answer: dict[str, Any]) -> None:
            data = json.dumps(answer).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except OSError:
                pass  # the client gave up (its deadline)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    slack.url = f"http://127.0.0.1:{server.server_address[1]}/api"
    serve_in_thread(server)
    return slack, server


def signature(secret: str, timestamp: str, body: bytes) -> str:
    """Slack's signature computed by hand (tests compare it with the reference's)."""
    return (
        "v0="
        + hmac.new(
            secret.encode(), b"v0:" + timestamp.encode() + b":" + body, hashlib.sha256
        ).hexdigest()
    )
