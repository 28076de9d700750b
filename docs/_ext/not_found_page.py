"""MkDocs hook: the 404 page works wherever the site is served.

The 404 page is shown at any missing address, at any depth, so MkDocs builds its links from the
server's root (`/assets/...`), which breaks when the site is served from a sub-path. This hook makes
its links relative and lets the page find the site's root when it loads: it walks up from the
address shown until `404.html` answers (the page's own file), and makes that folder the page's
`<base>`. The other pages link relatively already.
"""

import re

# Finds the site's folder: the nearest folder above the address whose 404.html exists (HTTP 200).
_FIND_ROOT = (
    "<script>(function(){var p=location.pathname.replace(/[^/]*$/,'');"
    "for(var i=0;i<32&&p!=='/';i++){var x=new XMLHttpRequest();"
    "try{x.open('HEAD',p+'404.html',false);x.send();}catch(e){break}"
    "if(x.status===200)break;p=p.replace(/[^/]*\\/$/,'');}"
    "window.__tfmpRoot=p;document.write('<base href=\"'+p+'\">');})();</script>"
)
# Points the theme's own settings (search index, its worker) at the root found above.
_PATCH_CONFIG = (
    "<script>(function(){var c=document.getElementById('__config'),j=JSON.parse(c.textContent);"
    "j.base=window.__tfmpRoot;j.search=window.__tfmpRoot+j.search;c.textContent=JSON.stringify(j);})();</script>"
)


def relative_not_found_page(html: str) -> str:
    """`html` (the built 404 page) with root-based links made relative and the root-finding `<base>`."""
    html = re.sub(r'(\s(?:href|src)=")/(?!/)', r"\1", html)
    html = html.replace('"base": "/"', '"base": "."').replace('"search": "/', '"search": "')
    html = re.sub(
        r'(<script id="__config"[^>]*>.*?</script>)', lambda m: m[1] + _PATCH_CONFIG, html, count=1, flags=re.S
    )
    return html.replace("<head>", "<head>" + _FIND_ROOT, 1)


def on_post_template(output_content, template_name, config):
    if template_name != "404.html":
        return output_content
    return relative_not_found_page(output_content)
