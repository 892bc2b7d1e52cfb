/* DeadDrop: the one script of the journalist interface. It runs only on the security key pages
 * (registering a key, and the key step of logging in), whose Content-Security-Policy names it
 * by a nonce; every other page has no script at all.
 *
 * The page carries the server's WebAuthn options as JSON in the form's data-options attribute
 * (binary values in base64url). A click asks the browser to talk to the key
 * (navigator.credentials.create or .get); the key's answer is written, as JSON, into the form's
 * hidden "credential" field and the form is sent as any other. Nothing else is read or sent.
 * What it says to the journalist comes, in the page's language, from the form's data-says
 * attribute (JSON: one message per key below); English is the fallback.
 */
(function () {
  "use strict";

  var form = document.querySelector("form[data-webauthn]");
  if (!form) {
    return;
  }
  var kind = form.getAttribute("data-webauthn");  // "create" or "get"
  var button = form.querySelector("[data-webauthn-start]");
  var status = document.getElementById("webauthn-status");
  var says = {};
  try {
    says = JSON.parse(form.getAttribute("data-says") || "{}");
  } catch (ignored) {
    says = {};
  }

  function say(key, english) {
    return typeof says[key] === "string" ? says[key] : english;
  }

  if (!window.PublicKeyCredential || !navigator.credentials) {
    document.getElementById("webauthn-missing").hidden = false;
    button.disabled = true;
    return;
  }

  function fromBase64url(text) {
    var base64 = text.replace(/-/g, "+").replace(/_/g, "/");
    while (base64.length % 4) {
      base64 += "=";
    }
    var binary = atob(base64);
    var out = new Uint8Array(binary.length);
    for (var i = 0; i < binary.length; i++) {
      out[i] = binary.charCodeAt(i);
    }
    return out.buffer;
  }

  function toBase64url(buffer) {
    var bytes = new Uint8Array(buffer);
    var binary = "";
    for (var i = 0; i < bytes.length; i++) {
      binary += String.fromCharCode(bytes[i]);
    }
    return btoa(binary).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  }

  function options() {
    var o = JSON.parse(form.getAttribute("data-options"));
    o.challenge = fromBase64url(o.challenge);
    if (o.user) {
      o.user.id = fromBase64url(o.user.id);
    }
    [o.allowCredentials || [], o.excludeCredentials || []].forEach(function (list) {
      list.forEach(function (descriptor) {
        descriptor.id = fromBase64url(descriptor.id);
      });
    });
    return o;
  }

  function serialise(credential) {
    var r = credential.response;
    var response = {clientDataJSON: toBase64url(r.clientDataJSON)};
    if (r.attestationObject) {
      response.attestationObject = toBase64url(r.attestationObject);
      response.transports = r.getTransports ? r.getTransports() : [];
    } else {
      response.authenticatorData = toBase64url(r.authenticatorData);
      response.signature = toBase64url(r.signature);
      if (r.userHandle) {
        response.userHandle = toBase64url(r.userHandle);
      }
    }
    return JSON.stringify({
      id: credential.id,
      rawId: toBase64url(credential.rawId),
      type: credential.type,
      response: response,
      authenticatorAttachment: credential.authenticatorAttachment || null,
      clientExtensionResults: credential.getClientExtensionResults()
    });
  }

  function explain(error) {
    var name = error && error.name;
    if (name === "InvalidStateError") {
      return say("registered", "This key is already registered to your account. Use another key, or keep this one.");
    }
    if (name === "SecurityError") {
      return say("address", "The browser refused to use a key on this address. Open the interface by the name " +
                            "your admin gave you (not a number), then try again.");
    }
    if (name === "NotAllowedError" || name === "AbortError") {
      return say("timeout", "The key was not touched in time, or the request was cancelled. Try again.");
    }
    return say("failed", "The browser could not talk to the key ({error}). Try again.")
      .replace("{error}", name || "error");
  }

  button.addEventListener("click", function () {
    if (kind === "create" && !form.reportValidity()) {
      return;
    }
    button.disabled = true;
    status.textContent = say("touch", "Touch your security key now.");
    var request = {publicKey: options()};
    var asked = kind === "create" ? navigator.credentials.create(request) : navigator.credentials.get(request);
    asked.then(function (credential) {
      form.querySelector("input[name=credential]").value = serialise(credential);
      status.textContent = say("checking", "Checking…");
      form.submit();
    }, function (error) {
      button.disabled = false;
      status.textContent = explain(error);
    });
  });
}());
