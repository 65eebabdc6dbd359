"""How API callers prove who they are."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from django.contrib.auth import get_user_model
from django.db import connection
from django.utils.translation import gettext_lazy as _
from psycopg import sql
from rest_framework import authentication, exceptions
from rest_framework.authtoken.models import Token

from kbsite.sqlrows import Columns, Row, column, table


class TokenAuthentication(authentication.TokenAuthentication):
    """DRF's token authentication, with the token and its user read by one SQL
    query: on every API request, the ORM's compiling of DRF's query took longer
    than running it."""

    def authenticate_credentials(self, key):
        read = _token_read()
        with connection.cursor() as cursor:
            cursor.execute(read.sql, [key])
            row = cursor.fetchone()
        if row is None:
            raise exceptions.AuthenticationFailed(_("Invalid token."))
        user = read.row.made(read.user, row)
        if not user.is_active:
            raise exceptions.AuthenticationFailed(_("User inactive or deleted."))
        token = read.row.made(read.token, row)
        token.user = user
        return user, token


@dataclass(frozen=True)
class _TokenRead:
    """A token (key, user, created) and its user, whole, read by one statement."""

    token: Columns[Token]
    user: Columns
    row: Row
    sql: str


@cache
def _token_read() -> _TokenRead:
    users = get_user_model()
    token = Columns(Token, Token._meta.concrete_fields, "t")
    user = Columns(users, users._meta.concrete_fields, "u")
    row = Row(token, user)
    statement = sql.SQL(
        "SELECT {row} FROM {tokens} t JOIN {users} u ON {user_pk} = {owner} "
        "WHERE {token_pk} = %s"
    ).format(
        row=row.sql,
        tokens=table(Token),
        users=table(users),
        user_pk=column(users, "pk", "u"),
        owner=column(Token, "user", "t"),
        token_pk=column(Token, "pk", "t"),
    )
    return _TokenRead(token=token, user=user, row=row, sql=statement.as_string())
