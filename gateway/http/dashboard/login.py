"""Who is using the dashboard: the session cookie and the CSRF token.

Rules kept here:
- A session is a token of the users file's (``Users.issue_token``, the
  kind ``POST /api/v1/login`` gives), kept in a cookie ``mqgate-session``:
  HttpOnly, SameSite=Strict, Path=/dashboard, Secure under HTTPS, living
  ``tokenTtl`` seconds. Ending it (logout) revokes the token; a new
  password, the user's removal or a restart ends it too.
- The CSRF token of a session is an HMAC of its token under a key made at
  start: nothing to store, different per session, unknown to other sites.
  Every change is a POST whose form carries it, compared in constant time.
- A change needs a session, its CSRF token, and the admin role, checked in
  that order; each failure is ``Forbidden`` (403) with one line to show.
- A form body is at most ``MAX_FORM`` bytes, parsed as
  application/x-www-form-urlencoded (no multipart).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from urllib.parse import parse_qs

from starlette.requests import Request
from starlette.responses import Response

from gateway.http.users import User, Users

COOKIE = "mqgate-session"
COOKIE_PATH = "/dashboard"
MAX_FORM = 16 * 1024


class Forbidden(Exception):
    """403: no session, a wrong CSRF token, or a read-only user changing something."""


class WebSessions:
    def __init__(self, users: Users, *, secure: bool = False) -> None:
        self.users = users
        self.secure = secure
        self._key = secrets.token_bytes(32)

    def csrf(self, token: str) -> str:
        return hmac.new(self._key, token.encode(), hashlib.sha256).hexdigest()[:40]

    def current(self, request: Request) -> tuple[User, str] | None:
        """(user, token) of the request's cookie, or None."""
        token = request.cookies.get(COOKIE)
        if not token:
            return None
        user = self.users.check_token(token)
        return None if user is None else (user, token)

    @staticmethod
    async def form(request: Request) -> dict[str, str]:
        if int(request.headers.get("content-length") or 0) > MAX_FORM:
            raise Forbidden("the form is too large")
        body = await request.body()
        if len(body) > MAX_FORM:
            raise Forbidden("the form is too large")
        return {k: v[0] for k, v in parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True).items()}

    async def checked_form(self, request: Request) -> tuple[User, str, dict[str, str]]:
        """The form of a POST from a session whose CSRF token it carries."""
        session = self.current(request)
        if session is None:
            raise Forbidden("not logged in, or the session expired: log in again")
        user, token = session
        form = await self.form(request)
        if not hmac.compare_digest(form.get("csrf", ""), self.csrf(token)):
            raise Forbidden("the form's CSRF token is missing or wrong: reload the page and try again")
        return user, token, form

    async def change(self, request: Request, what: str) -> tuple[User, dict[str, str]]:
        """``checked_form``, and the admin role (``what`` names the change for the 403)."""
        user, _token, form = await self.checked_form(request)
        if not user.admin:
            raise Forbidden(f"user {user.name!r} is read-only: {what} needs the admin role")
        return user, form

    def start(self, response: Response, user: User) -> None:
        response.set_cookie(COOKIE, self.users.issue_token(user), max_age=int(self.users.token_ttl),
                            path=COOKIE_PATH, httponly=True, samesite="strict", secure=self.secure)

    def end(self, response: Response, token: str | None) -> None:
        if token is not None:
            self.users.revoke_token(token)
        response.delete_cookie(COOKIE, path=COOKIE_PATH, httponly=True, samesite="strict", secure=self.secure)
