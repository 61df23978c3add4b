"""The identity in a verified client certificate."""

from __future__ import annotations

from typing import Any

from gateway.listeners._spec import CertIdentity

# The short names OpenSSL prints in RFC 2253 / 4514 form.
_SHORT = {
    "commonName": "CN", "countryName": "C", "stateOrProvinceName": "ST", "localityName": "L",
    "organizationName": "O", "organizationalUnitName": "OU", "streetAddress": "STREET",
    "domainComponent": "DC", "userId": "UID",
}


def _escape(value: str) -> str:
    out = []
    for i, ch in enumerate(value):
        if ch in ',+"\\<>;' or (ch == "#" and i == 0) or (ch == " " and i in (0, len(value) - 1)):
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


def identity_from_peercert(cert: dict[str, Any] | None) -> CertIdentity | None:
    """From ``SSLObject.getpeercert()`` (a verified certificate) or None."""
    if not cert or "subject" not in cert:
        return None
    common_name = None
    rdns = []
    for rdn in cert["subject"]:
        parts = []
        for name, value in rdn:
            if name == "commonName" and common_name is None:
                common_name = value
            parts.append(f"{_SHORT.get(name, name)}={_escape(value)}")
        rdns.append("+".join(parts))
    return CertIdentity(common_name=common_name, subject=",".join(reversed(rdns)))
