"""The web layer every app's views share: the typed htmx request, page-or-fragment rendering, the
one login-and-permission decorator, the one way to declare a role and its permissions, the
JSON-object form field and the read-only admin base.

A project-level shell: it imports only Django, django-htmx, django-rules and the standard library,
so each app (policies included) may use it without depending on another app. Each app declares
its own permissions with `role` and `permissions_register` (`policies.permissions`,
`agentops.permissions`, `reviews.roles`); views here only name the permission.
A page and its htmx fragment are one template: `render_page` renders `"<page>#<fragment>"` for
htmx and the whole page otherwise, and the response always varies on HX-Request so that no cache
hands a fragment to a full-page load.
A polled fragment carries the version of what it shows (`poll_version`); a poll that sends it back
unchanged gets `poll_unchanged`'s empty 204, which htmx does not swap (docs/architecture.md). A
version may carry the time it stops holding (relative times on the fragment tick then).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from functools import wraps
from typing import TYPE_CHECKING, Any

from django import forms
from django.conf import settings
from django.contrib import admin
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.http.response import HttpResponseBase
from django.shortcuts import render
from django.utils import timezone
from django.utils.cache import patch_vary_headers
from django.utils.crypto import salted_hmac
from django.utils.functional import Promise
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django_htmx.http import HttpResponseClientRedirect
from django_htmx.middleware import HtmxDetails
from rules.permissions import add_perm
from rules.predicates import Predicate, is_active, is_authenticated, is_group_member

if TYPE_CHECKING:
    from django.contrib.auth.models import User
    from django_stubs_ext import StrOrPromise, StrPromise

View = Callable[..., HttpResponseBase]


class HtmxHttpRequest(HttpRequest):
    """A request that passed through django-htmx's middleware (as every request here does)."""

    htmx: HtmxDetails


class AuthenticatedHttpRequest(HtmxHttpRequest):
    """A request a signed-in user made: what a view behind `permission_required` (or an API
    endpoint behind its token) receives, so `request.user` has the type the services take."""

    user: User


def request_user(request: HttpRequest) -> User:
    """The user of a request that passed a login check whose view cannot declare it (an admin
    method keeps ModelAdmin's signature): the admin site lets only signed-in staff through."""
    from django.contrib.auth.models import AnonymousUser

    user = request.user
    if isinstance(user, AnonymousUser):
        raise PermissionDenied(_("sign in first"))
    return user


def wants_fragment(request: HttpRequest) -> bool:
    """Whether to answer with the fragment: an htmx request, except a history restore after a
    cache miss, which needs the whole page although htmx sent it."""
    htmx: HtmxDetails | None = getattr(request, "htmx", None)
    return bool(htmx and not htmx.history_restore_request)


def varying(response: HttpResponse) -> HttpResponse:
    """Mark `response` as depending on HX-Request (a page and its fragment share a URL)."""
    patch_vary_headers(response, ("HX-Request",))
    return response


def render_page(
    request: HttpRequest,
    template: str,
    context: Mapping[str, Any] | None = None,
    *,
    fragment: str | None = None,
    status: int = 200,
) -> HttpResponse:
    """Render `template`, or only its partial `fragment` (`{% partialdef fragment %}` in the same
    file) when htmx asks for it; the response varies on HX-Request either way."""
    name = f"{template}#{fragment}" if fragment and wants_fragment(request) else template
    return varying(render(request, name, context, status=status))


# The header a polled fragment sends back with the version it shows (its `hx-headers`).
POLL_VERSION_HEADER = "X-Poll-Version"


def poll_version(*parts: Any, until_ms: int | None = None) -> str:
    """A short digest of `parts`: everything a polled fragment shows, read cheaply (timestamps,
    sequence numbers, ids, the viewer and the query), so that any change the reader would see
    changes the version. Never a secret: it says only "same as before" to whoever holds it.

    `until_ms` (milliseconds since the epoch): the fragment reads the same only until then (a
    relative time it prints changes); the version carries it in the clear after a dot, under
    the digest, and a poll from then on is answered with the fragment whatever else holds
    (`poll_unchanged`)."""
    stamp = "" if until_ms is None else f".{until_ms}"
    text = "\0".join(repr(part) for part in (*parts, stamp))
    return salted_hmac("agentops.web.poll_version", text).hexdigest()[:24] + stamp


def poll_sent(request: HttpRequest) -> bool:
    """Whether `request` is a poll carrying the version its fragment shows (worth reading the
    version cheaply before loading the page)."""
    return request.method == "GET" and POLL_VERSION_HEADER in request.headers


def poll_sent_until_ms(request: HttpRequest) -> int | None:
    """The time (ms since the epoch) until which the version a poll sent holds (None when it
    carries none, or none that reads as one: the digest then matches nothing computed)."""
    return _version_until_ms(request.headers.get(POLL_VERSION_HEADER, ""))


def _version_until_ms(version: str) -> int | None:
    _, dot, stamp = version.partition(".")
    if not dot or not stamp.isdigit() or len(stamp) > 15:
        return None
    return int(stamp)


def _now_ms() -> int:
    """Now in milliseconds since the epoch, rounded up (a version expires no later than due)."""
    return -int(-timezone.now().timestamp() * 1000 // 1)


def poll_unchanged(request: HttpRequest, version: str) -> HttpResponse | None:
    """The answer to a poll that already shows `version`: 204 No Content, no body (htmx leaves
    the fragment as it is), or None when the fragment must be rendered (also once the version's
    `until` has passed). Only a GET fragment request counts; the view's login and role checks
    have run before (a 204 tells nothing to someone who may not read the page, since they never
    reach this)."""
    if request.method != "GET" or not wants_fragment(request):
        return None
    if request.headers.get(POLL_VERSION_HEADER) != version:
        return None
    until_ms = _version_until_ms(version)
    if until_ms is not None and _now_ms() >= until_ms:
        return None
    response = HttpResponse(status=204)
    patch_vary_headers(response, ("HX-Request", POLL_VERSION_HEADER))
    return response


REFUSAL = gettext_lazy("you may not do this")


def permission_required(
    perm: str | None, *, refusal: StrOrPromise = REFUSAL
) -> Callable[[View], View]:
    """Decorate a view: anonymous users are sent to log in, and others need `perm` (None: being
    signed in is enough), else 403 with `refusal` (the 403 page shows it: give it lazily
    translated, `gettext_lazy`, so it reads in the reader's language).

    An htmx request without a session (it expired while a panel was polling) gets an HX-Redirect
    to the login page with `next`, so the browser loads the whole login page instead of swapping
    it into a fragment.
    """

    def decorate(view: View) -> View:
        @wraps(view)
        def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
            if not request.user.is_authenticated:
                login = redirect_to_login(request.get_full_path())
                if getattr(request, "htmx", False):
                    return HttpResponseClientRedirect(login.url)
                return login
            if perm is not None and not request.user.has_perm(perm):
                raise PermissionDenied(str(refusal))
            return view(request, *args, **kwargs)

        return wrapped

    return decorate


# Pages any signed-in person may open (their own account, the task list).
login_required = permission_required(None)


def role(group: str) -> Predicate:
    """The predicate of a role: a signed-in, active member of `group` (a group the migrations
    create). Every role is made here, so every role checks the same things, and django-rules
    reads a user's group names once per user object however many roles a page asks about."""
    predicate: Predicate = is_authenticated & is_active & is_group_member(group)
    return predicate


def permissions_register(permissions: Mapping[str, tuple[Predicate, str]]) -> None:
    """Register an app's permissions (`"<app>.<name>": (predicate, what it lets one do)`) with
    django-rules; everyone then asks through Django (`user.has_perm`, `permission_required`,
    `{% if perms.<app>.<name> %}`). Each app calls it once, from its `AppConfig.ready`."""
    for name, (predicate, _what) in permissions.items():
        add_perm(name, predicate)


_JSON_TYPE_NAMES: dict[type, Promise] = {
    list: gettext_lazy("an array"),
    str: gettext_lazy("a string"),
    int: gettext_lazy("a number"),
    float: gettext_lazy("a number"),
    bool: gettext_lazy("a boolean"),
    type(None): gettext_lazy("null"),
}

# What the json module says of a text it cannot read (its words are the msgids, so English reads
# as before), in the reader's language; a message not listed here is shown as the module gives it.
_JSON_ERRORS: dict[str, Promise] = {
    "Expecting value": gettext_lazy("Expecting value"),
    "Expecting ':' delimiter": gettext_lazy("Expecting ':' delimiter"),
    "Expecting ',' delimiter": gettext_lazy("Expecting ',' delimiter"),
    "Expecting property name enclosed in double quotes": gettext_lazy(
        "Expecting property name enclosed in double quotes"
    ),
    "Unterminated string starting at": gettext_lazy("Unterminated string starting at"),
    "Extra data": gettext_lazy("Extra data"),
    "Invalid control character at": gettext_lazy("Invalid control character at"),
    "Invalid \\escape": gettext_lazy("Invalid \\escape"),
    "Invalid \\uXXXX escape": gettext_lazy("Invalid \\uXXXX escape"),
}

# The field's messages for each value a form names, whole sentences (a noun glued into a sentence
# reads wrong in other languages); a noun not listed uses the generic ones, which name it as given.
_JSON_MESSAGES: dict[str, dict[str, StrPromise]] = {
    "value": {
        "invalid_json": gettext_lazy(
            "The value is not valid JSON: %(msg)s (line %(line)s, column %(col)s)."
        ),
        "not_object": gettext_lazy(
            "The value must be a JSON object, like %(example)s; got %(kind)s."
        ),
        "not_serializable": gettext_lazy("The value cannot be stored as JSON: %(error)s."),
        "too_deep": gettext_lazy("The value is nested too deeply."),
    },
    "input": {
        "invalid_json": gettext_lazy(
            "The input is not valid JSON: %(msg)s (line %(line)s, column %(col)s)."
        ),
        "not_object": gettext_lazy(
            "The input must be a JSON object, like %(example)s; got %(kind)s."
        ),
        "not_serializable": gettext_lazy("The input cannot be stored as JSON: %(error)s."),
        "too_deep": gettext_lazy("The input is nested too deeply."),
    },
    "arguments": {
        "invalid_json": gettext_lazy(
            "The arguments are not valid JSON: %(msg)s (line %(line)s, column %(col)s)."
        ),
        "not_object": gettext_lazy(
            "The arguments must be a JSON object, like %(example)s; got %(kind)s."
        ),
        "not_serializable": gettext_lazy("The arguments cannot be stored as JSON: %(error)s."),
        "too_deep": gettext_lazy("The arguments are nested too deeply."),
    },
    "input changes": {
        "invalid_json": gettext_lazy(
            "The input changes are not valid JSON: %(msg)s (line %(line)s, column %(col)s)."
        ),
        "not_object": gettext_lazy(
            "The input changes must be a JSON object, like %(example)s; got %(kind)s."
        ),
        "not_serializable": gettext_lazy("The input changes cannot be stored as JSON: %(error)s."),
        "too_deep": gettext_lazy("The input changes are nested too deeply."),
    },
}
# For a noun not in the table (in English, as given).
_JSON_GENERIC = {
    "invalid_json": (
        "The %(noun)s %(verb)s not valid JSON: %(msg)s (line %(line)s, column %(col)s)."
    ),
    "not_object": "The %(noun)s must be a JSON object, like %(example)s; got %(kind)s.",
    "not_serializable": "The %(noun)s cannot be stored as JSON: %(error)s.",
    "too_deep": "The %(noun)s %(verb)s nested too deeply.",
}


class JSONObjectField(forms.CharField):
    """A JSON object typed into a textarea, cleaned to a dict.

    `noun` names the value in the messages ("the input is not valid JSON ...", "the
    arguments are ..." with `plural`); `max_chars` is
    checked before parsing, with its own message (a browser's maxlength would cut a long paste
    silently, and the cut text would then be called invalid JSON); `check` (the save path's
    validator, for instance) may refine or refuse the parsed value by raising ValueError. An
    empty text is `{}` when the field is not required.
    """

    widget = forms.Textarea

    def __init__(
        self,
        *,
        noun: str = "value",
        plural: bool = False,
        example: str = '{"key": "value"}',
        max_chars: int | None = None,
        check: Callable[[Any, str], Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self.noun = noun
        self.verb = "are" if plural else "is"
        self.example = example
        self.max_chars = max_chars
        self.check = check
        super().__init__(**kwargs)

    def to_python(self, value: Any) -> Any:
        # CharField gives its empty_value ("" here) for an empty input; the stubs allow None.
        text = (super().to_python(value) or "").strip()
        if not text:
            return None if self.required else {}
        if self.max_chars is not None and len(text) > self.max_chars:
            raise ValidationError(
                _("Too large: %(size)s characters, the limit is %(limit)s."),
                code="too_large",
                params={"size": f"{len(text):,}", "limit": f"{self.max_chars:,}"},
            )
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError as exc:
            raise self._refusal(
                "invalid_json",
                msg=str(_JSON_ERRORS.get(exc.msg, exc.msg)),
                line=exc.lineno,
                col=exc.colno,
            ) from None
        except RecursionError:
            raise self._too_deep() from None
        if not isinstance(parsed, dict):
            raise self._refusal(
                "not_object",
                example=self.example,
                kind=str(_JSON_TYPE_NAMES.get(type(parsed), type(parsed).__name__)),
            )
        if self.check is None:
            return parsed
        try:
            return self.check(parsed, self.noun)
        except ValueError as exc:
            raise self._refusal("not_serializable", error=str(exc)) from None
        except RecursionError:
            raise self._too_deep() from None

    def _too_deep(self) -> ValidationError:
        return self._refusal("too_deep")

    def _refusal(self, code: str, **params: Any) -> ValidationError:
        """The error `code` for this field's noun, a whole sentence in the reader's language
        (`_JSON_MESSAGES`; a noun not listed there gets the generic English sentence)."""
        message = _JSON_MESSAGES.get(self.noun, {}).get(code) or _JSON_GENERIC[code]
        return ValidationError(
            message,
            code=code,
            params={"noun": self.noun, "verb": self.verb, **params},
        )

    def validate(self, value: Any) -> None:
        # A typed `{}` is an answer; only a required field left empty is an error.
        if self.required and value is None:
            raise ValidationError(self.error_messages["required"], code="required")

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, dict):
            return json.dumps(value, indent=2, ensure_ascii=False)
        return value


# `type-arg`: ModelAdmin is generic only in django-stubs (see the admin override in pyproject.toml).
class ReadOnlyAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """An admin that lists and shows rows but never adds, changes or deletes them: the rows are
    written by services (or are append-only)."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


def body_too_big_words() -> str:
    return _("the request body is larger than %(size)s bytes, the most this server reads") % {
        "size": settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    }


def body_too_big(request: HttpRequest) -> HttpResponse:
    """The 400 for a request body over DATA_UPLOAD_MAX_MEMORY_SIZE: JSON under the API's prefix
    (its clients read JSON), plain text elsewhere."""
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": body_too_big_words()}, status=400)
    return HttpResponse(body_too_big_words() + "\n", status=400, content_type="text/plain")
