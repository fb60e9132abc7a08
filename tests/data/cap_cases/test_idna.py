"""Does requests 2.25.1 encode an international host name with this idna?"""


def test_unicode_host():
    import idna
    import requests

    prepared = requests.Request("GET", "http://bücher.example/path").prepare()
    assert prepared.url == "http://xn--bcher-kva.example/path"
    assert idna.encode("bücher") == b"xn--bcher-kva"
