"""How API callers prove who they are."""

from __future__ import annotations

from typing import cast

from django.contrib.auth import get_user_model
from django.db import connection
from django.utils.translation import gettext_lazy as _
from rest_framework import authentication, exceptions
from rest_framework.authtoken.models import Token

from kbsite.sqlrows import column, columns, model_from_row


class TokenAuthentication(authentication.TokenAuthentication):
    """DRF's token authentication, with the token and its user read by one SQL
    query: on every API request, the ORM's compiling of DRF's query took longer
    than running it."""

    def authenticate_credentials(self, key):
        tokens = cast(type[Token], self.get_model())
        users = get_user_model()
        token_fields = tokens._meta.concrete_fields  # key, user, created
        user_fields = users._meta.concrete_fields
        owner = next(f for f in token_fields if f.name == "user")
        quote = connection.ops.quote_name
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT {columns(token_fields, 't')}, {columns(user_fields, 'u')} "
                f"FROM {quote(tokens._meta.db_table)} t "
                f"JOIN {quote(users._meta.db_table)} u "
                f"ON {column(users._meta.pk, 'u')} = {column(owner, 't')} "
                f"WHERE {column(tokens._meta.pk, 't')} = %s",
                [key],
            )
            row = cursor.fetchone()
        if row is None:
            raise exceptions.AuthenticationFailed(_("Invalid token."))
        user = model_from_row(users, user_fields, row[len(token_fields) :])
        if not user.is_active:
            raise exceptions.AuthenticationFailed(_("User inactive or deleted."))
        token = model_from_row(tokens, token_fields, row[: len(token_fields)])
        token.user = user
        return user, token
